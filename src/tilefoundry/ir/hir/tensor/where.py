"""Where: elementwise select `cond ? x : y` (a consensus op, torch.where).

Torch broadcasting over all three operands, like Binary; x and y share a dtype (no promotion) and
cond is bool. No Partial is carried: selecting by cond is not linear in cond, and a select between
two pending values is a sum of addends only under conditions the types cannot prove, so every
pending reduction must be completed before the select.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    broadcast_operand_shapes,
    numpy_dtype,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, bool_
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
from tilefoundry.rules.validation_samples import BOOL, Sample, operand


class Where(Op):
    """Select `x` where `cond` holds and `y` elsewhere; produces a Tensor."""

    cond = ParamDef("input")
    x = ParamDef("input")
    y = ParamDef("input")


def _named(arg_types) -> tuple[tuple[str, TensorType], ...]:
    return tuple(zip(Where.inputs(), arg_types, strict=True))


@register_typeinfer(Where)
def _typeinfer(op: Where, arg_types, ctx) -> TensorType:
    cond, x, y = tensor_operands(op, arg_types)
    if not cond.dtype.is_bool:
        raise VerifyError(
            f"Where: operand 'cond' must be bool, got {cond.dtype}; compare first "
            "(e.g. cmp_ne(cond, 0))"
        )
    dtype = same_dtype(op, (("x", x), ("y", y)))
    refuse_partials(
        op,
        _named(arg_types),
        why="where selects per element, which is not linear in cond and not proven to "
        "commute with any pending reduction of x or y",
    )
    out_shape = broadcast_operand_shapes(op, _named(arg_types))
    layout = propagate(op, arg_types, out_shape)
    return TensorType(out_shape, dtype, layout, result_storage(op, arg_types))


@register_access_relation(Where)
def _relation(op: Where, arg_types):
    operands = _named(tensor_operands(op, arg_types))
    out_shape = broadcast_operand_shapes(op, operands)
    return elementwise_relations(3, out_shape, tuple(t.shape for _, t in operands))


@register_eval(Where)
def _eval(op: Where, args, out_type: TensorType) -> np.ndarray:
    cond, x, y = (np.asarray(a) for a in args)
    return np.where(cond, x, y).astype(numpy_dtype(out_type.dtype), copy=False)


register_surface("where", Where)
register_fusion_kind(Where, FusionKind.ELEMENTWISE)


@register_vjp(Where)
def _vjp(call, ct, ad):
    """Each branch receives the cotangent where it was selected, zero elsewhere; the bool
    condition receives none."""
    tf = ad.tf
    cond, x, y = call.args
    zero = ad.scalar(0.0, ct)
    return (
        None,
        lambda: ad.sum_to(tf.where(cond, ct, zero), x.type.shape),
        lambda: ad.sum_to(tf.where(cond, zero, ct), y.type.shape),
    )


@register_validation_samples(Where)
def _validation_samples() -> list[Sample]:
    x = operand(4, 8)
    return [
        Sample(Where(), (operand(4, 8, dtype=bool_, domain=BOOL), x, x)),
        Sample(Where(), (operand(8, dtype=bool_, domain=BOOL), x, x), "cond (8)", False),
    ]


@register_stablehlo(Where)
def _stablehlo(op: Where, operands, arg_types, out_type, lw):
    """`stablehlo.select`, every operand broadcast to the result shape first."""
    shape = lw.shape(out_type)
    cond, x, y = (
        Value.of(lw, n, t).broadcast_to(shape) for n, t in zip(operands, arg_types, strict=True)
    )
    return cond.select(x, y).name


@register_pallas(Where)
def _pallas(op: Where, args, arg_types, out_type, kx):
    cond, x, y = args
    return kx.jnp.where(cond, x, y).astype(kx.dtype(out_type.dtype))
