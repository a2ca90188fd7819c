"""TupleGetItem (hir tensor; types §5): the one way a TupleType value is consumed.

The result is the selected field's type unchanged (sharding, Partial states and all: a projection
computes nothing, so there is nothing to commute). `index` follows Python: a negative index counts
from the end; out of range is a VerifyError naming the tuple's arity. The operand is a tuple, which
has no coordinate space, so no affine boundary describes it (`NO_AFFINE_RELATION`).
"""

from __future__ import annotations

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION
from tilefoundry.ir.types import TupleType, Type
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_pallas_sharded,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, TupleOperand, operand


class TupleGetItem(Op):
    """Field `index` of the tuple `value`."""

    value = ParamDef("input")
    index = ParamDef("attribute", int)


def field_index(op: TupleGetItem, arity: int) -> int:
    """`index` in [-arity, arity) as a non-negative position."""
    if not -arity <= op.index < arity:
        raise VerifyError(
            f"TupleGetItem: index {op.index} is out of range for a tuple of {arity} field(s) "
            f"(valid: {-arity}..{arity - 1})"
        )
    return op.index % arity


@register_typeinfer(TupleGetItem)
def _typeinfer(op: TupleGetItem, arg_types, ctx) -> Type:
    (value,) = arg_types
    if not isinstance(value, TupleType):
        raise VerifyError(
            f"TupleGetItem: operand 'value' must be a tuple, got {value}; only a tuple-typed "
            "value (a multi-output op, a Tuple) has fields to select"
        )
    return value.fields[field_index(op, len(value.fields))]


register_access_relation(TupleGetItem)(NO_AFFINE_RELATION)


@register_eval(TupleGetItem)
def _eval(op: TupleGetItem, args, out_type: Type):
    (value,) = args
    return value[field_index(op, len(value))]


@register_sharded_eval(TupleGetItem)
def _sharded_eval(op: TupleGetItem, args, call):
    """Projection moves no data: each field keeps its own per-device placement."""
    (value,) = args
    return value[field_index(op, len(value))]


@register_spmd_lowering(TupleGetItem)
def _spmd_lowering(op: TupleGetItem, operands, call):
    """On devices too a projection picks the field's per-device value; nothing moves."""
    (value,) = operands
    return value[field_index(op, len(value))]


register_surface("tuple_get_item", TupleGetItem)
register_fusion_kind(TupleGetItem, FusionKind.BARRIER)


@register_vjp(TupleGetItem)
def _vjp(call, ct, ad):
    """The projected field receives the cotangent; the other fields receive none."""
    fields = call.args[0].type.fields
    index = call.target.index % len(fields)
    return (lambda: tuple(ct if i == index else None for i in range(len(fields))),)


@register_validation_samples(TupleGetItem)
def _validation_samples() -> list[Sample]:
    value = (TupleOperand((operand(4, 8), operand(8))),)
    return [
        Sample(TupleGetItem(index=0), value, "field 0"),
        Sample(TupleGetItem(index=1), value, "field 1", False),
    ]


@register_stablehlo(TupleGetItem)
def _stablehlo(op: TupleGetItem, operands, arg_types, out_type, lw):
    """A projection emits nothing: the tuple's fields are already separate SSA values."""
    (value,) = operands
    return value[field_index(op, len(value))]


@register_pallas(TupleGetItem)
def _pallas(op: TupleGetItem, args, arg_types, out_type, kx):
    (value,) = args
    return value[field_index(op, len(value))]


@register_pallas_sharded(TupleGetItem)
def _pallas_sharded(op: TupleGetItem, args, call):
    """Projection moves no data: each field is already this CTA's value."""
    (value,) = args
    return value[field_index(op, len(value))]
