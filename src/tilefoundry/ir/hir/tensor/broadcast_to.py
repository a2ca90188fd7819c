"""BroadcastTo: explicit torch broadcast to a target shape (the form `legalize` writes, DESIGN
§4.10).

Broadcasting only replicates elements, so it is linear and order-preserving: a pending sum, max
or min of the operand is the same pending reduction of the result, and every Partial carries.
A size-1 axis that grows reads the constant 0, so a Split on it cannot carry (the engine fails
closed on a non-projection access).
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    propagate,
    result_storage,
    shape_attribute,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, format_dim
from tilefoundry.ir.types.shard.int_tuple import same_value
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand


class BroadcastTo(Op):
    """Broadcast `x` to `shape` (torch right-aligned rules); produces a Tensor."""

    x = ParamDef("input")
    shape = ParamDef("attribute", tuple, validate=shape_attribute)


def _check_broadcastable(op: BroadcastTo, x: TensorType) -> None:
    target = op.shape
    lead = len(target) - x.rank
    if lead < 0:
        raise VerifyError(
            f"BroadcastTo: operand 'x' has rank {x.rank} but the target shape {list(target)} "
            f"has rank {len(target)}; broadcasting never drops axes (use reduce or reshape)"
        )
    for axis, extent in enumerate(x.shape):
        wanted = target[lead + axis]
        if (isinstance(extent, int) and extent == 1) or same_value(extent, wanted):
            continue
        raise VerifyError(
            f"BroadcastTo: operand 'x' axis {axis} has extent {format_dim(extent)}, which "
            f"cannot broadcast to {format_dim(wanted)} (target axis {lead + axis}); only size-1 "
            "axes grow"
        )


@register_typeinfer(BroadcastTo)
def _typeinfer(op: BroadcastTo, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    _check_broadcastable(op, x)
    layout = propagate(op, arg_types, op.shape)
    return TensorType(op.shape, x.dtype, layout, result_storage(op, arg_types))


@register_access_relation(BroadcastTo)
def _relation(op: BroadcastTo, arg_types):
    (x,) = tensor_operands(op, arg_types)
    _check_broadcastable(op, x)
    return elementwise_relations(1, op.shape, (x.shape,))


@register_eval(BroadcastTo)
def _eval(op: BroadcastTo, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    return np.array(np.broadcast_to(np.asarray(x), out_type.shape))


register_surface("broadcast_to", BroadcastTo)
register_fusion_kind(BroadcastTo, FusionKind.VIEW)


@register_vjp(BroadcastTo)
def _vjp(call, ct, ad):
    """Each replica received the cotangent of its copy: sum them back."""
    return (lambda: ad.sum_to(ct, call.args[0].type.shape),)


@register_validation_samples(BroadcastTo)
def _validation_samples() -> list[Sample]:
    return [
        Sample(BroadcastTo(shape=(4, 8)), (operand(8),), "(8)->(4,8)"),
        Sample(BroadcastTo(shape=(4, 8)), (operand(1, 8),), "(1,8)->(4,8)"),
    ]


@register_stablehlo(BroadcastTo)
def _stablehlo(op: BroadcastTo, operands, arg_types, out_type, lw):
    x = Value.of(lw, operands[0], arg_types[0])
    return x.broadcast_to(lw.shape(out_type)).name


@register_pallas(BroadcastTo)
def _pallas(op: BroadcastTo, args, arg_types, out_type, kx):
    """To the LOCAL result shape: inside a CTA the target is its block, not `op.shape`."""
    (x,) = args
    return kx.jnp.broadcast_to(x, out_type.shape)
