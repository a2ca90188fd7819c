"""Binary's execution forms, one table per exit side by side so they stay one semantics: the
reference kernel (numpy), the StableHLO lowering and the Pallas rule of every kind.

The semantics are StableHLO's, bit for bit on integers: arithmetic wraps; maximum/minimum order
-0.0 below +0.0 and propagate NaN; a shift by the bit width or more (the amount read as unsigned)
gives 0, or the sign fill for shift_right_arithmetic; pow of integers is exact with wrap, and a
negative exponent gives 0 unless the base is 1 or -1; trunc_div rounds toward zero and rem takes
the dividend's sign (INT_MIN / -1 wraps to INT_MIN, INT_MIN rem -1 is 0). floor_div and mod are
Python's. An integer division by zero is an evaluation error in the reference and undefined at
the exits. Narrow floats compute in f32 and round once, on every exit.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import EvalError
from tilefoundry.ir.hir.math.binary import (
    INTEGER_DIVISIONS,
    SHIFTS,
    Binary,
    BinaryKind,
    operand_dtype,
)
from tilefoundry.ir.hir.op_support import compute_in_f32, computes_into
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType
from tilefoundry.rules import (
    register_eval,
    register_eval_into,
    register_pallas,
    register_stablehlo,
)


def _zeros_to_order(lhs: np.ndarray, rhs: np.ndarray, negative_when) -> tuple | None:
    """Where both operands are zeros, whether the result is -0.0 (`negative_when` of the two
    sign bits); None when no such position exists. Read before a kernel may overwrite them."""
    if lhs.dtype.kind != "f" or rhs.dtype.kind != "f":
        return None
    both = (lhs == 0) & (rhs == 0)
    if not both.any():
        return None
    return both, negative_when(np.signbit(lhs), np.signbit(rhs))


def _ordered(result: np.ndarray, zeros: tuple | None) -> np.ndarray:
    if zeros is not None:
        both, negative = zeros
        np.copyto(result, np.where(negative, -0.0, 0.0).astype(result.dtype), where=both)
    return result


def maximum(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.maximum with StableHLO's order of zeros: max(+0.0, -0.0) is +0.0 either way round."""
    zeros = _zeros_to_order(lhs, rhs, np.logical_and)
    return _ordered(np.maximum(lhs, rhs, out=out), zeros)


def minimum(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.minimum with StableHLO's order of zeros: min(+0.0, -0.0) is -0.0 either way round."""
    zeros = _zeros_to_order(lhs, rhs, np.logical_or)
    return _ordered(np.minimum(lhs, rhs, out=out), zeros)


def _power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    if base.dtype.kind not in "iu":
        return np.power(base, exponent)
    base, exponent = np.broadcast_arrays(base, exponent)
    steps = int(np.max(exponent, initial=0)).bit_length()
    return integer_power(np, base, exponent, steps)


def integer_power(xp, base, exponent, steps: int):
    """base ** exponent by squaring, `steps` bits of the exponent (enough for its largest),
    wrapping as integer multiplication does; `xp` is numpy or jax.numpy (the Pallas rule)."""
    result, square, remaining = xp.ones_like(base), base, xp.maximum(exponent, 0)
    for _ in range(steps):
        result = xp.where(remaining % 2 == 1, result * square, result)
        square, remaining = square * square, remaining // 2
    if not xp.issubdtype(base.dtype, xp.signedinteger):
        return result
    odd = exponent % 2 == 1
    reciprocal = xp.where(base == 1, 1, xp.where(base == -1, xp.where(odd, -1, 1), 0))
    return xp.where(exponent < 0, reciprocal.astype(base.dtype), result)


def _unsigned_twin(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


def _shift(kind: BinaryKind, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Shifts on the two's-complement bits, the amount read as unsigned (so a negative one is
    out of range); numpy leaves amounts past the width to the platform."""
    dtype, bits = lhs.dtype, lhs.dtype.itemsize * 8
    unsigned = _unsigned_twin(dtype)
    amount = rhs.astype(unsigned)
    in_range = amount < bits
    amount = np.where(in_range, amount, 0).astype(unsigned)
    if kind == BinaryKind.SHIFT_RIGHT_ARITHMETIC:
        signed = lhs.astype(np.dtype(f"i{dtype.itemsize}"))
        shifted = np.right_shift(signed, np.where(in_range, amount, bits - 1).astype(signed.dtype))
        return shifted.astype(dtype)
    if kind == BinaryKind.SHIFT_LEFT:
        shifted = np.left_shift(lhs.astype(unsigned), amount)
    else:
        shifted = np.right_shift(lhs.astype(unsigned), amount)
    return np.where(in_range, shifted, 0).astype(dtype)


def _trunc_div(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """Floor division stepped up where the exact quotient is negative and not whole."""
    quotient = np.floor_divide(lhs, rhs)
    if lhs.dtype.kind == "u":
        return quotient
    inexact = np.fmod(lhs, rhs) != 0
    return np.where(inexact & ((lhs < 0) != (rhs < 0)), quotient + 1, quotient)


_KERNELS = {
    BinaryKind.ADD: np.add,
    BinaryKind.SUB: np.subtract,
    BinaryKind.MUL: np.multiply,
    BinaryKind.DIV: np.true_divide,
    BinaryKind.FLOOR_DIV: np.floor_divide,
    BinaryKind.MOD: np.mod,
    BinaryKind.MIN: minimum,
    BinaryKind.MAX: maximum,
    BinaryKind.EQ: np.equal,
    BinaryKind.NE: np.not_equal,
    BinaryKind.LT: np.less,
    BinaryKind.LE: np.less_equal,
    BinaryKind.GT: np.greater,
    BinaryKind.GE: np.greater_equal,
    BinaryKind.AND: np.logical_and,
    BinaryKind.OR: np.logical_or,
    BinaryKind.POW: _power,
    BinaryKind.BITWISE_AND: np.bitwise_and,
    BinaryKind.BITWISE_OR: np.bitwise_or,
    BinaryKind.BITWISE_XOR: np.bitwise_xor,
    **{kind: lambda a, b, kind=kind: _shift(kind, a, b) for kind in SHIFTS},
    BinaryKind.TRUNC_DIV: _trunc_div,
    BinaryKind.REM: np.fmod,
}


def _adopt_scalar_dtype(lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round a float literal to the other operand's dtype first, as the surface would have."""
    if lhs.dtype == rhs.dtype:
        return lhs, rhs
    if lhs.ndim == 0 and lhs.dtype == np.float32:
        return lhs.astype(rhs.dtype), rhs
    return lhs, rhs.astype(lhs.dtype)


@register_eval(Binary)
def _eval(op: Binary, args, out_type: TensorType) -> np.ndarray:
    lhs, rhs = _adopt_scalar_dtype(*(np.asarray(a) for a in args))
    integer_division = op.kind in INTEGER_DIVISIONS and rhs.dtype.kind in "iu"
    if integer_division and np.any(np.broadcast_arrays(lhs, rhs)[1] == 0):
        raise EvalError(f"Binary: integer {op.kind.value} by zero")
    with np.errstate(all="ignore"):
        return compute_in_f32(_KERNELS[op.kind], out_type.dtype, lhs, rhs)


_ARITHMETIC = frozenset(
    {
        BinaryKind.ADD,
        BinaryKind.SUB,
        BinaryKind.MUL,
        BinaryKind.DIV,
        BinaryKind.FLOOR_DIV,
        BinaryKind.MOD,
        BinaryKind.MIN,
        BinaryKind.MAX,
    }
)


@register_eval_into(Binary)
def _eval_into(op: Binary, args, out_type: TensorType, out: np.ndarray) -> np.ndarray | None:
    """`_eval`'s float arithmetic written into `out`: on operands of out's float dtype the kernel
    writes exactly what it would return (nothing widened, no integer division to check)."""
    if op.kind not in _ARITHMETIC:
        return None
    lhs, rhs = _adopt_scalar_dtype(*(np.asarray(a) for a in args))
    if not computes_into(out, lhs, rhs):
        return None
    with np.errstate(all="ignore"):
        return _KERNELS[op.kind](lhs, rhs, out=out)


_STABLEHLO_OPS = {
    BinaryKind.ADD: "add",
    BinaryKind.SUB: "subtract",
    BinaryKind.MUL: "multiply",
    BinaryKind.DIV: "divide",
    BinaryKind.MIN: "minimum",
    BinaryKind.MAX: "maximum",
    BinaryKind.AND: "and",
    BinaryKind.OR: "or",
    BinaryKind.POW: "power",
    BinaryKind.BITWISE_AND: "and",
    BinaryKind.BITWISE_OR: "or",
    BinaryKind.BITWISE_XOR: "xor",
    BinaryKind.SHIFT_LEFT: "shift_left",
    BinaryKind.SHIFT_RIGHT_ARITHMETIC: "shift_right_arithmetic",
    BinaryKind.SHIFT_RIGHT_LOGICAL: "shift_right_logical",
    BinaryKind.TRUNC_DIV: "divide",
    BinaryKind.REM: "remainder",
}
_COMPARISON_SYMBOLS = {
    BinaryKind.EQ: "==",
    BinaryKind.NE: "!=",
    BinaryKind.LT: "<",
    BinaryKind.LE: "<=",
    BinaryKind.GT: ">",
    BinaryKind.GE: ">=",
}
_FLOOR_DIVISIONS = frozenset({BinaryKind.FLOOR_DIV, BinaryKind.MOD})


def _floor_division(lhs, rhs, want_quotient: bool):
    """numpy's floor_divide / mod (Python semantics) from StableHLO's truncating `divide` and
    `remainder`: step the quotient down, and the remainder over by rhs, where the truncated
    remainder's sign differs from the divisor's. Floats follow numpy's divmod: the quotient is
    (lhs - fmod) / rhs rounded to the nearest integer, and division by zero gives lhs / rhs.
    Integer division by zero is an evaluation error in the reference and undefined here."""
    remainder = lhs.binary("remainder", rhs)
    if lhs.dtype.is_unsigned:
        return lhs / rhs if want_quotient else remainder
    fixup = (remainder != 0) & ((remainder < 0) != (rhs < 0))
    if not want_quotient:
        return fixup.select(remainder + rhs, remainder)
    if not lhs.dtype.is_float:
        quotient = lhs / rhs
        return fixup.select(quotient - 1, quotient)
    exact = (lhs - remainder) / rhs
    exact = fixup.select(exact - 1.0, exact)
    floored = exact.unary("floor")
    rounded = (exact - floored > 0.5).select(floored + 1.0, floored)
    return (rhs == 0).select(lhs / rhs, rounded)


@register_stablehlo(Binary)
def _stablehlo(op: Binary, operands, arg_types, out_type, lw):
    """Implicit broadcasts become broadcast_in_dim (until `legalize` makes them explicit), the
    float literal takes the other operand's dtype, and narrow floats compute in f32, as the
    kernel does."""
    lhs_type, rhs_type = arg_types
    dtype = operand_dtype(op, lhs_type, rhs_type)
    shape = lw.shape(out_type)
    lhs, rhs = (
        Value.of(lw, name, type_).convert(dtype).broadcast_to(shape).widened()
        for name, type_ in zip(operands, arg_types, strict=True)
    )
    kind = op.kind
    if kind in _COMPARISON_SYMBOLS:
        return lhs.compare(_COMPARISON_SYMBOLS[kind], rhs).name
    if kind in _FLOOR_DIVISIONS:
        result = _floor_division(lhs, rhs, want_quotient=kind == BinaryKind.FLOOR_DIV)
    else:
        result = lhs.binary(_STABLEHLO_OPS[kind], rhs)
    return result.convert(out_type.dtype).name


_PALLAS_KERNELS = {
    BinaryKind.ADD: "add",
    BinaryKind.SUB: "subtract",
    BinaryKind.MUL: "multiply",
    BinaryKind.DIV: "true_divide",
    BinaryKind.FLOOR_DIV: "floor_divide",
    BinaryKind.MOD: "mod",
    BinaryKind.MIN: "minimum",
    BinaryKind.MAX: "maximum",
    BinaryKind.EQ: "equal",
    BinaryKind.NE: "not_equal",
    BinaryKind.LT: "less",
    BinaryKind.LE: "less_equal",
    BinaryKind.GT: "greater",
    BinaryKind.GE: "greater_equal",
    BinaryKind.AND: "logical_and",
    BinaryKind.OR: "logical_or",
    BinaryKind.BITWISE_AND: "bitwise_and",
    BinaryKind.BITWISE_OR: "bitwise_or",
    BinaryKind.BITWISE_XOR: "bitwise_xor",
}
_PALLAS_LAX = {
    BinaryKind.SHIFT_LEFT: "shift_left",
    BinaryKind.SHIFT_RIGHT_ARITHMETIC: "shift_right_arithmetic",
    BinaryKind.SHIFT_RIGHT_LOGICAL: "shift_right_logical",
    BinaryKind.TRUNC_DIV: "div",
    BinaryKind.REM: "rem",
}
"""lax, not jnp: jnp's shifts and divisions are numpy's, these are StableHLO's (and, unlike jnp,
take no implicit broadcast)."""


def _pallas_kernel(kind: BinaryKind, kx):
    if kind in _PALLAS_LAX:
        lax_op = getattr(kx.lax, _PALLAS_LAX[kind])
        return lambda lhs, rhs: lax_op(*kx.jnp.broadcast_arrays(lhs, rhs))
    if kind == BinaryKind.POW:
        return lambda base, exponent: _pallas_power(kx.jnp, base, exponent)
    if kind in (BinaryKind.MAX, BinaryKind.MIN):
        return kx.maximum if kind == BinaryKind.MAX else kx.minimum  # NaN kept on a GPU too
    return getattr(kx.jnp, _PALLAS_KERNELS[kind])


def _pallas_power(jnp, base, exponent):
    """jnp.power treats a negative integer exponent as a huge one; the squaring loop runs the
    exponent's full width, since a traced exponent has no known largest value."""
    if not jnp.issubdtype(base.dtype, jnp.integer):
        return jnp.power(base, exponent)
    return integer_power(jnp, base, exponent, jnp.iinfo(exponent.dtype).bits)


@register_pallas(Binary)
def _pallas(op: Binary, args, arg_types, out_type, kx):
    """The reference kernel's numpy function, spelled in jnp (same name table)."""
    lhs, rhs = args
    if lhs.dtype != rhs.dtype and getattr(lhs, "ndim", 1) == 0:
        lhs = lhs.astype(rhs.dtype)  # the reference kernel rounds a float literal first
    elif lhs.dtype != rhs.dtype and getattr(rhs, "ndim", 1) == 0:
        rhs = rhs.astype(lhs.dtype)
    return kx.in_f32(_pallas_kernel(op.kind, kx), out_type.dtype, lhs, rhs)
