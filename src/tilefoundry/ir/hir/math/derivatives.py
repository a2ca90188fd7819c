"""The VJP rules of Binary and Unary (DESIGN §4.18), one derivative per kind.

They live beside the two op modules rather than inside them because both are kind tables that
grow (a new kind adds its derivative here, next to its siblings'). Each derivative is written in
HIR ops on the forward values, so the backward program is typed by the forward's rules; torch
broadcasting in the forward is transposed by `ad.sum_to`. Conventions are JAX's: max/min split a
tie evenly between the operands, abs has derivative 0 at 0, and the piecewise-constant kinds
(ceil, round, floor_div) pass no cotangent. A kind in neither table is refused where it is
differentiated, so a new kind never differentiates to a silent zero.
"""

from __future__ import annotations

import math

from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.rules import register_vjp

_LN2 = math.log(2.0)
_TWO_ON_ROOT = 2.0 / math.sqrt(math.pi)  # erf'(x) = 2 / sqrt(pi) exp(-x^2)


def extremum_share(ad, chosen, other, kind: BinaryKind):
    """1 where `chosen` wins the max (or min), 1/2 on a tie, 0 where `other` wins: JAX's
    derivative of `maximum` / `minimum` (Clamp's rule composes two of them)."""
    tf = ad.tf
    wins = tf.cmp_gt(chosen, other) if kind == BinaryKind.MAX else tf.cmp_lt(chosen, other)
    tie = tf.where(tf.cmp_eq(chosen, other), ad.scalar(0.5, chosen), ad.scalar(0.0, chosen))
    return tf.where(wins, ad.scalar(1.0, chosen), tie)


@register_vjp(Binary)
def _binary_vjp(call, ct, ad):
    tf = ad.tf
    lhs, rhs = call.args
    kind = call.target.kind

    def to_lhs(value):
        return lambda: ad.sum_to(value(), lhs.type.shape)

    def to_rhs(value):
        return lambda: ad.sum_to(value(), rhs.type.shape)

    if kind == BinaryKind.ADD:
        return to_lhs(lambda: ct), to_rhs(lambda: ct)
    if kind == BinaryKind.SUB:
        return to_lhs(lambda: ct), to_rhs(lambda: tf.neg(ct))
    if kind == BinaryKind.MUL:
        return to_lhs(lambda: tf.mul(ct, rhs)), to_rhs(lambda: tf.mul(ct, lhs))
    if kind == BinaryKind.DIV:
        return (
            to_lhs(lambda: tf.div(ct, rhs)),
            to_rhs(lambda: tf.neg(tf.div(tf.mul(ct, call), rhs))),
        )
    if kind in (BinaryKind.MAX, BinaryKind.MIN):
        return (
            to_lhs(lambda: tf.mul(ct, extremum_share(ad, lhs, rhs, kind))),
            to_rhs(lambda: tf.mul(ct, extremum_share(ad, rhs, lhs, kind))),
        )
    if kind == BinaryKind.MOD:
        return to_lhs(lambda: ct), to_rhs(lambda: tf.neg(tf.mul(ct, tf.floor_div(lhs, rhs))))
    if kind == BinaryKind.REM:  # lhs - rhs * trunc(lhs / rhs); the quotient is (lhs - y) / rhs
        quotient = tf.div(tf.sub(lhs, call), rhs)
        return to_lhs(lambda: ct), to_rhs(lambda: tf.neg(tf.mul(ct, quotient)))
    if kind == BinaryKind.POW:
        return (
            to_lhs(lambda: tf.mul(ct, _power_base_derivative(ad, lhs, rhs))),
            to_rhs(lambda: tf.mul(ct, _power_exponent_derivative(ad, lhs, call))),
        )
    if kind in _BINARY_WITHOUT_COTANGENT:
        return None, None
    return _refused(ad, kind), _refused(ad, kind)


def _power_base_derivative(ad, base, exponent):
    """d(b^e)/db = e b^(e-1), 0 where e = 0 (as JAX: b^-1 of a zero base would give nan)."""
    tf = ad.tf
    zero = ad.scalar(0.0, base)
    slope = tf.mul(exponent, tf.pow(base, tf.sub(exponent, 1.0)))
    return tf.where(tf.cmp_eq(exponent, zero), zero, slope)


def _power_exponent_derivative(ad, base, y):
    """d(b^e)/de = b^e log b, 0 where b = 0 (as JAX)."""
    tf = ad.tf
    zero = ad.scalar(0.0, base)
    return tf.where(tf.cmp_eq(base, zero), zero, tf.mul(y, tf.log(base)))


_BINARY_WITHOUT_COTANGENT = frozenset(
    BinaryKind[name] for name in ("FLOOR_DIV", "EQ", "NE", "LT", "LE", "GT", "GE", "AND", "OR")
)
"""Piecewise constant (floor_div) or bool results: no cotangent flows."""


def _refused(ad, kind):
    """A kind with no derivative written yet is refused where it is differentiated (never a
    silent zero)."""

    def refuse():
        ad.refuse(
            f"reverse mode has no derivative for kind '{kind.value}' yet",
            "differentiate with respect to inputs that do not reach it, or write the derivative "
            "in ir/hir/math/derivatives.py",
        )

    return refuse


def _abs_derivative(ad, x, y):
    tf = ad.tf
    zero, one = ad.scalar(0.0, x), ad.scalar(1.0, x)
    negative = tf.where(tf.cmp_lt(x, zero), ad.scalar(-1.0, x), zero)
    return tf.where(tf.cmp_gt(x, zero), one, negative)


_UNARY_DERIVATIVES = {
    # kind: (ad, x, y = the forward result) -> dy/dx, each a forward value
    UnaryKind.NEG: None,
    UnaryKind.ABS: _abs_derivative,
    UnaryKind.RSQRT: lambda ad, x, y: ad.tf.mul(ad.tf.mul(y, ad.tf.mul(y, y)), -0.5),
    UnaryKind.RELU: lambda ad, x, y: ad.tf.where(
        ad.tf.cmp_gt(x, ad.scalar(0.0, x)), ad.scalar(1.0, x), ad.scalar(0.0, x)
    ),
    UnaryKind.SQUARE: lambda ad, x, y: ad.tf.mul(x, 2.0),
    UnaryKind.EXP: lambda ad, x, y: y,
    UnaryKind.LOG: lambda ad, x, y: ad.tf.div(1.0, x),
    UnaryKind.EXP2: lambda ad, x, y: ad.tf.mul(y, _LN2),
    UnaryKind.LOG2: lambda ad, x, y: ad.tf.div(1.0, ad.tf.mul(x, _LN2)),
    UnaryKind.SQRT: lambda ad, x, y: ad.tf.div(0.5, y),
    UnaryKind.EXPM1: lambda ad, x, y: ad.tf.add(y, 1.0),
    UnaryKind.LOG1P: lambda ad, x, y: ad.tf.div(1.0, ad.tf.add(x, 1.0)),
    UnaryKind.ERF: lambda ad, x, y: ad.tf.mul(ad.tf.exp(ad.tf.neg(ad.tf.square(x))), _TWO_ON_ROOT),
}
"""The kinds with a derivative; NEG is linear (its cotangent is the negated one)."""

_UNARY_WITHOUT_COTANGENT = frozenset(
    UnaryKind[name] for name in ("CEIL", "ROUND", "ROUND_HALF_AWAY", "SIGN", "NOT", "IS_FINITE")
)
"""Piecewise constant (ceil, the roundings, sign) or bool (not, is_finite): no cotangent."""


@register_vjp(Unary)
def _unary_vjp(call, ct, ad):
    kind = call.target.kind
    if kind in _UNARY_WITHOUT_COTANGENT:
        return (None,)
    if kind not in _UNARY_DERIVATIVES:
        return (_refused(ad, kind),)
    derivative = _UNARY_DERIVATIVES[kind]
    if derivative is None:
        return (lambda: ad.tf.neg(ct),)
    (x,) = call.args
    return (lambda: ad.tf.mul(ct, derivative(ad, x, call)),)
