"""Reverse: the order of elements along some axes reversed (StableHLO `reverse`, numpy `flip`).

Each element moves to exactly one place, so every pending reduction commutes with it: Partial
sum, max and min carry. A reversed axis is a whole (existential) axis of the relation
(`whole_axis`): device k's block of the result is the reverse of device n-1-k's block of the
input, a move between devices the op does not make, so a Split there fails closed; a Split on an
axis left in order carries.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    normalize_axis,
    propagate,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import reads_except, refuse_splits_on, whole_axis_relations
from tilefoundry.ir.types import TensorType
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


class Reverse(Op):
    """`x` with the element order of each axis in `axes` reversed."""

    x = ParamDef("input")
    axes = ParamDef("attribute", tuple)


def reversed_axes(op: Reverse, rank: int) -> tuple[int, ...]:
    """`axes` normalised, sorted; an axis named twice is refused (it would be a no-op)."""
    axes = [normalize_axis(op, a, rank, "axes entry") for a in op.axes]
    if len(set(axes)) != len(axes):
        raise VerifyError(
            f"Reverse: axes {op.axes} names an axis twice; reversing twice is the identity, "
            "name each axis once"
        )
    return tuple(sorted(axes))


@register_typeinfer(Reverse)
def _typeinfer(op: Reverse, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    axes = reversed_axes(op, x.rank)
    refuse_splits_on(
        op,
        (("x", x, set(axes)),),
        "reversing a split axis moves every block to the mirrored device",
    )
    layout = propagate(op, (x,), x.shape, relations=_relation(op, (x,), exists=False))
    return TensorType(x.shape, x.dtype, layout, result_storage(op, (x,)))


@register_access_relation(Reverse)
def _relation(op: Reverse, arg_types, *, exists: bool = True):
    """Domain = the axes kept in order; each reversed axis is read and written whole."""
    (x,) = tensor_operands(op, arg_types)
    axes = reversed_axes(op, x.rank)
    reads = reads_except(x.rank, set(axes))
    return whole_axis_relations(x.rank - len(axes), [reads], [reads], exists=exists)


@register_eval(Reverse)
def _eval(op: Reverse, args, out_type: TensorType) -> np.ndarray:
    x = np.asarray(args[0])
    return np.flip(x, reversed_axes(op, x.ndim)) if op.axes else x


register_surface("reverse", Reverse)
register_fusion_kind(Reverse, FusionKind.BARRIER)


@register_vjp(Reverse)
def _vjp(call, ct, ad):
    """Reversing is its own transpose."""
    return (lambda: ad.tf.reverse(ct, axes=call.target.axes),)


@register_validation_samples(Reverse)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Reverse(axes=(1,)), (operand(4, 8),), "axis 1"),
        Sample(Reverse(axes=(0, -1)), (operand(4, 4, 8),), "axes 0, 2", False),
    ]


@register_stablehlo(Reverse)
def _stablehlo(op: Reverse, operands, arg_types, out_type, lw):
    axes = reversed_axes(op, arg_types[0].rank)
    if not axes:
        return operands[0]
    dims = ", ".join(map(str, axes))
    return lw.op(f"stablehlo.reverse {operands[0]}, dims = [{dims}] : {lw.type(out_type)}")


@register_pallas(Reverse, reads_refs=True)
def _pallas(op: Reverse, args, arg_types, out_type, kx):
    """`kx.reverse`: of a gmem parameter, one gather-load of its Ref at the reversed positions;
    of a value on a GPU, halves swapped without arithmetic."""
    (x,) = args
    if not op.axes:
        return kx.load(x)
    return kx.reverse(x, reversed_axes(op, arg_types[0].rank))
