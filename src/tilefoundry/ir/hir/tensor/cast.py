"""Cast: convert the element dtype (hir §1.3 ir/hir/tensor Cast).

Cast is the identity on shape, storage and layout; only the dtype changes. It is the conversion
boundary for the low-precision formats, so any dtype converts to any other at typeinfer; only the
reference evaluator limits the targets it can produce: its one support table
(`evaluator/dtypes.py`, DESIGN §4.9) refuses a call whose result dtype it lacks (f4e2m1) before
the kernel runs, so the kernel converts to whatever it is given.

Pending reductions: the seed states no commutation for Cast; an exact widening (every value of
the operand's dtype is one of the target's) is the identity on values, so it carries them
(`_refuse_partials` says which): this is how a bf16 partial is all-reduced in f32.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    as_dtype,
    numpy_dtype,
    refuse_partials,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.types import DType, TensorType, bf16, f16, f32, i16, i32
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


class Cast(Op):
    """Convert the element dtype; produces a Tensor."""

    x = ParamDef("input")
    dtype = ParamDef("attribute", DType, validate=as_dtype)


def widens_exactly(source: DType, target: DType) -> bool:
    """Whether every value of `source` is a value of `target`: a float format with at least as
    many exponent and mantissa bits (bf16/f16 -> f32, f32 -> f64), or an integer range inside
    the target's (i8 -> i32, u8 -> i16; never signed -> unsigned)."""
    if source.is_float and target.is_float:
        return (
            target.exponent_bits >= source.exponent_bits
            and target.mantissa_bits >= source.mantissa_bits
        )
    if source.is_int and target.is_int:
        if source.is_unsigned:
            return target.bits > source.bits or (target.is_unsigned and target.bits >= source.bits)
        return not target.is_unsigned and target.bits >= source.bits
    return False


def _refuse_partials(op: Cast, x: TensorType) -> None:
    """A widening cast is the identity on values, so it commutes with max and min, and the
    widened addends sum to the widened sum: a float Partial(sum) means the real sum, which
    rounds no worse in the wider format. Integer sums wrap at the operand's range, which the
    wider sum does not, so an integer widening carries only max/min. Any other cast rounds or
    wraps some value, and no commutation is proven for it (the seed states none)."""
    source, target = x.dtype, op.dtype
    if not widens_exactly(source, target):
        why = (
            f"a cast {source} -> {target} rounds or wraps some values, so it is not proven to "
            "commute with any reduction; only a widening cast, which holds every value exactly "
            f"(e.g. {source} -> {_widening_example(source)}), carries a pending reduction"
        )
        refuse_partials(op, (("x", x),), why=why)
    elif source.is_int:
        why = (
            f"a pending sum of {source} wraps at {source}'s range, which the {target} sum of the "
            f"widened addends does not, so the widening {source} -> {target} carries max/min only"
        )
        refuse_partials(op, (("x", x),), allowed=("max", "min"), why=why)


def _widening_example(source: DType) -> str:
    if source.is_int:
        return "i64" if source.is_signed else "a wider int"
    return "f64" if source == f32 else "f32"


@register_typeinfer(Cast)
def _typeinfer(op: Cast, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    if op.dtype != x.dtype:
        _refuse_partials(op, x)
    return TensorType(x.shape, op.dtype, x.layout, result_storage(op, arg_types))


@register_access_relation(Cast)
def _relation(op: Cast, arg_types):
    (x,) = tensor_operands(op, arg_types)
    return elementwise_relations(1, x.shape, (x.shape,))


@register_eval(Cast)
def _eval(op: Cast, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/out-of-range follow numpy, as torch
        return np.asarray(x).astype(numpy_dtype(op.dtype))


register_surface("cast", Cast)
register_fusion_kind(Cast, FusionKind.ELEMENTWISE)


@register_vjp(Cast)
def _vjp(call, ct, ad):
    """A float-to-float cast is the identity on values up to rounding: its cotangent is cast
    back (an integer input has none; an integer result carries none, so it never gets here)."""
    (x,) = call.args
    if not x.type.dtype.is_float:
        return (None,)
    return (lambda: ad.tf.cast(ct, x.type.dtype),)


@register_validation_samples(Cast)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Cast(dtype="f16"), (operand(4, 8),), "f32->f16"),
        Sample(Cast(dtype="i32"), (operand(4, 8),), "f32->i32"),
        Sample(Cast(dtype="f32"), (operand(4, 8, dtype=bf16),), "bf16->f32 (widening)"),
        Sample(Cast(dtype="i32"), (operand(4, 8, dtype=i16),), "i16->i32 (widening)"),
        Sample(Cast(dtype="f32"), (operand(4, 8, dtype=i32),), "i32->f32", False),
        Sample(Cast(dtype="f32"), (operand(4, 8, dtype=f16),), "f16->f32 (widening)", False),
        Sample(Cast(dtype="f64"), (operand(4, 8),), "f32->f64 (widening)", False),
    ]


@register_stablehlo(Cast)
def _stablehlo(op: Cast, operands, arg_types, out_type, lw):
    """`stablehlo.convert`: to bool is `!= 0`, float to integer truncates toward zero, as numpy
    does for in-range values (NaN and out-of-range floats are unspecified in both)."""
    return lw.convert(operands[0], arg_types[0], out_type)


@register_pallas(Cast)
def _pallas(op: Cast, args, arg_types, out_type, kx):
    (x,) = args
    return x.astype(kx.dtype(op.dtype))
