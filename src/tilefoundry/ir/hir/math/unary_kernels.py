"""Unary's execution forms, one table per exit side by side so they stay one semantics: the
reference kernel (numpy), the StableHLO lowering and the Pallas rule of every kind.

The semantics are StableHLO's: sign keeps the sign of zero, round_half_away rounds ties away from
zero (round_nearest_afz) and round ties to even (round_nearest_even), relu(-0.0) is +0.0 as
StableHLO's maximum orders -0 below +0, bitwise_not inverts the two's-complement bits. Narrow
floats compute in f32 and round once, on every exit.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from tilefoundry.ir.hir.math.binary_kernels import maximum
from tilefoundry.ir.hir.math.unary import IDENTITY_ON_INTEGERS, Unary, UnaryKind
from tilefoundry.ir.hir.op_support import compute_in_f32, computes_into
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType
from tilefoundry.rules import (
    register_eval,
    register_eval_into,
    register_pallas,
    register_stablehlo,
)


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _relu(x: np.ndarray) -> np.ndarray:
    return maximum(x, x.dtype.type(0))


def _sign(x: np.ndarray) -> np.ndarray:
    """np.sign gives +0.0 for -0.0; StableHLO's sign keeps the zero as it is."""
    signs = np.sign(x)
    return np.where(x == 0, x, signs) if x.dtype.kind == "f" else signs


_ERF_OBJECTS = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """libm's erf per element in f64 (numpy has no erf): the truth each exit's approximation is
    judged against; the caller rounds it once to the result dtype."""
    return np.asarray(_ERF_OBJECTS(x.astype(np.float64)), dtype=np.float64)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """x - trunc(x) is exact, so the tie test is too (adding 0.5 first would round 0.49999997
    up to 1 in f32)."""
    whole = np.trunc(x)
    return np.where(np.abs(x - whole) >= 0.5, whole + np.copysign(1, x), whole)


_KERNELS = {
    UnaryKind.NEG: np.negative,
    UnaryKind.ABS: np.abs,
    UnaryKind.RSQRT: _rsqrt,
    UnaryKind.NOT: np.logical_not,
    UnaryKind.RELU: _relu,
    UnaryKind.SQUARE: np.square,
    UnaryKind.EXP: np.exp,
    UnaryKind.LOG: np.log,
    UnaryKind.CEIL: np.ceil,
    UnaryKind.ROUND: np.rint,
    UnaryKind.EXP2: np.exp2,
    UnaryKind.LOG2: np.log2,
    UnaryKind.SQRT: np.sqrt,
    UnaryKind.SIGN: _sign,
    UnaryKind.EXPM1: np.expm1,
    UnaryKind.LOG1P: np.log1p,
    UnaryKind.ERF: _erf,
    UnaryKind.IS_FINITE: np.isfinite,
    UnaryKind.ROUND_HALF_AWAY: _round_half_away,
    UnaryKind.BITWISE_NOT: np.invert,
}


@register_eval(Unary)
def _eval(op: Unary, args, out_type: TensorType) -> np.ndarray:
    (x,) = (np.asarray(a) for a in args)
    if op.kind in IDENTITY_ON_INTEGERS and x.dtype.kind in "iu":
        return x.copy()  # through a float the wide integers would lose precision
    with np.errstate(all="ignore"):
        return compute_in_f32(_KERNELS[op.kind], out_type.dtype, x)


_UFUNC_KINDS = frozenset(kind for kind, kernel in _KERNELS.items() if isinstance(kernel, np.ufunc))


@register_eval_into(Unary)
def _eval_into(op: Unary, args, out_type: TensorType, out: np.ndarray) -> np.ndarray | None:
    """`_eval` on a float operand of out's dtype, when the kind is one ufunc: written into `out`,
    it writes exactly what it would return."""
    (x,) = (np.asarray(a) for a in args)
    if op.kind not in _UFUNC_KINDS or not computes_into(out, x):
        return None
    with np.errstate(all="ignore"):
        return _KERNELS[op.kind](x, out=out)


_STABLEHLO_OPS = {
    UnaryKind.NEG: "negate",
    UnaryKind.RSQRT: "rsqrt",
    UnaryKind.NOT: "not",
    UnaryKind.EXP: "exponential",
    UnaryKind.LOG: "log",
    UnaryKind.CEIL: "ceil",
    UnaryKind.ROUND: "round_nearest_even",
    UnaryKind.SQRT: "sqrt",
    UnaryKind.EXPM1: "exponential_minus_one",
    UnaryKind.LOG1P: "log_plus_one",
    UnaryKind.ROUND_HALF_AWAY: "round_nearest_afz",
    UnaryKind.BITWISE_NOT: "not",
}
_LN2 = float(np.log(2.0))


def _lower_kind(kind: UnaryKind, x: Value) -> Value:
    if kind == UnaryKind.ABS:
        return x if x.dtype.is_unsigned else x.unary("abs")
    if kind == UnaryKind.RELU:
        return x.maximum(0)
    if kind == UnaryKind.SQUARE:
        return x * x
    if kind == UnaryKind.EXP2:
        return x.full(2.0).binary("power", x)
    if kind == UnaryKind.LOG2:
        return x.unary("log") / _LN2
    if kind == UnaryKind.SIGN:  # StableHLO's sign takes no unsigned operand
        return x.binary("minimum", 1) if x.dtype.is_unsigned else x.unary("sign")
    if kind == UnaryKind.ERF:
        return x.chlo_unary("erf")
    if kind == UnaryKind.IS_FINITE:
        return x.is_finite()
    return x.unary(_STABLEHLO_OPS[kind])


@register_stablehlo(Unary)
def _stablehlo(op: Unary, operands, arg_types, out_type, lw):
    """Narrow floats in f32 and rounded once, as the kernel; ceil/round of an integer is the
    identity (the kernel never routes integers through a float)."""
    x = Value.of(lw, operands[0], arg_types[0])
    if op.kind in IDENTITY_ON_INTEGERS and not x.dtype.is_float:
        return x.name
    return _lower_kind(op.kind, x.widened()).convert(out_type.dtype).name


def _pallas_kernel(kind: UnaryKind, kx):
    jnp, lax = kx.jnp, kx.lax
    special = {
        UnaryKind.RSQRT: lambda x: 1 / jnp.sqrt(x),
        UnaryKind.RELU: lambda x: kx.maximum(x, jnp.zeros((), x.dtype)),
        UnaryKind.ROUND: lambda x: _rounded(jnp, x, ties_to_even=True),
        UnaryKind.ROUND_HALF_AWAY: lambda x: _rounded(jnp, x, ties_to_even=False),
        UnaryKind.ERF: partial(_erf_from_exp, jnp) if kx.gpu else lax.erf,
    }
    names = {
        UnaryKind.NEG: "negative",
        UnaryKind.ABS: "abs",
        UnaryKind.NOT: "logical_not",
        UnaryKind.SQUARE: "square",
        UnaryKind.EXP: "exp",
        UnaryKind.LOG: "log",
        UnaryKind.CEIL: "ceil",
        UnaryKind.EXP2: "exp2",
        UnaryKind.LOG2: "log2",
        UnaryKind.SQRT: "sqrt",
        UnaryKind.SIGN: "sign",
        UnaryKind.EXPM1: "expm1",
        UnaryKind.LOG1P: "log1p",
        UnaryKind.IS_FINITE: "isfinite",
        UnaryKind.BITWISE_NOT: "invert",
    }
    return special.get(kind) or getattr(jnp, names[kind])


_ERF_NEAR_ZERO = (1.1283792, -0.37612629, 0.11283612, -0.026854809, 0.0051900535, -8.0243539e-4,
                  7.8982099e-5)  # fmt: skip
_ERFCX_TAIL = (2.5961348e-5, 0.56371921, 0.0030154584, -0.28518632, -0.06926851, 0.89948595,
               -1.5240539, 1.4240049, -0.81060416, 0.26466262, -0.038217604)  # fmt: skip
_ERF_IS_ONE = 4.0
"""From here on erf(x) rounds to 1 in f32: erfc(4) = 1.5e-8 is below half an ulp of 1 (3e-8)."""


def _erf_from_exp(jnp, x):
    """erf from what every GPU lowering has (Triton has no erf): below 1, x * P(x^2); from 1 to
    4, 1 - exp(-x^2) R(1/|x|) with R the scaled erfc, erfc(x) exp(x^2); beyond, 1; the sign put
    back, so erf is odd and erf(-0.0) = -0.0. P (degree 6) and R (degree 10) are least-squares
    fits of the relative error at 4000 Chebyshev nodes of each interval (numpy, against scipy's
    erf and erfcx in float64), rounded to f32. Measured in the kernel (interpreted, 2^20 points:
    [-6, 6] dense, 1e-40 to 1e-3 geometric, the specials) against math.erf in float64: max abs
    error 1.3e-7, max rel error 1.7e-7 over normal results (2.3 ulp, near |x| = 0.46: the f32
    rounding of the Horner steps; lax.erf in the same run: 3.0e-7); erf(+-inf) = +-1, NaN stays
    NaN, subnormal inputs flush to zero as XLA's CPU and the GPU flush them (lax.erf alike).
    `tests/exits/pallas/test_gpu_forms_math.py` holds it to that. Nothing is clamped with min /
    max, whose Triton forms drop NaNs."""
    magnitude = jnp.abs(x)
    square = x * x
    near_zero = x * _horner(_ERF_NEAR_ZERO, square)
    tail = 1 - jnp.exp(-square) * _horner(_ERFCX_TAIL, 1 / magnitude)
    tail = jnp.where(magnitude < _ERF_IS_ONE, tail, jnp.ones_like(x))
    signed_tail = jnp.where(x < 0, -tail, tail)
    erf = jnp.where(magnitude < 1, near_zero, signed_tail)
    return jnp.where(x != x, x, erf)


def _horner(coefficients, v):
    """sum c_i v^i, lowest degree first."""
    total = coefficients[-1]
    for c in coefficients[-2::-1]:
        total = total * v + c
    return total


def _rounded(jnp, x, ties_to_even: bool):
    """Round to the nearest integer through floor (no GPU lowering has `round`): |x| - floor(|x|)
    is exact, so the tie test is too; a tie goes to the even neighbour, or away from zero. A zero
    result keeps x's sign (x * 0), and what is not finite is x itself, as StableHLO rounds."""
    magnitude = jnp.abs(x)
    below = jnp.floor(magnitude)
    fraction = magnitude - below
    if ties_to_even:
        odd = below - 2 * jnp.floor(below / 2)
        up = (fraction > 0.5) | ((fraction == 0.5) & (odd == 1))
    else:
        up = fraction >= 0.5
    nearest = jnp.where(up, below + 1, below)
    signed = jnp.where(x < 0, -nearest, nearest)
    signed = jnp.where(signed == 0, x * 0, signed)
    return jnp.where(jnp.isfinite(x), signed, x)


@register_pallas(Unary)
def _pallas(op: Unary, args, arg_types, out_type, kx):
    """The reference kernel in jnp: identity on integers for ceil/round, f32 for narrow floats."""
    (x,) = args
    if op.kind in IDENTITY_ON_INTEGERS and kx.jnp.issubdtype(x.dtype, kx.jnp.integer):
        return x
    return kx.in_f32(_pallas_kernel(op.kind, kx), out_type.dtype, x)
