"""Elementwise activations: ReLU, Sigmoid, Tanh, Gelu (tanh approximation) and Silu.

Each one keeps x's whole type (shape, dtype, layout, storage): an activation reads exactly the
element it writes, so nothing about distribution or residency changes. What differs between
them is only which pending mesh reductions they commute with (hir §1.3 nn):

- ReLU / Sigmoid / Tanh are monotone non-decreasing, so `f(max(a, b)) == max(f(a), f(b))` (and
  likewise for min): a Partial(max|min) passes, a Partial(sum) does not.
- Gelu and Silu dip below zero before rising again, so they are not monotone and commute with no
  reduction at all.

Kernels compute narrow floats in f32 and round once; Silu in particular never rounds its inner
sigmoid, which is the whole point of fusing it (hir §1.3 Silu).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import compute_in_f32, op_name, refuse_partials, tensor_operands
from tilefoundry.ir.lowering.values import Value
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


def _only_tanh(value: str) -> str:
    """hir §1.3 Gelu names "tanh" only; the erf form is not in the seed, so it fails closed."""
    if value != "tanh":
        raise VerifyError(f'only "tanh" (the tanh approximation) is defined, got {value!r}')
    return value


class ReLU(Op):
    """max(x, 0)."""

    x = ParamDef("input")


class Sigmoid(Op):
    """1 / (1 + exp(-x))."""

    x = ParamDef("input")


class Tanh(Op):
    """Hyperbolic tangent."""

    x = ParamDef("input")


class Gelu(Op):
    """Gaussian Error Linear Unit, tanh approximation (HF gelu_pytorch_tanh)."""

    x = ParamDef("input")
    approximate = ParamDef("attribute", str, default="tanh", validate=_only_tanh)


class Silu(Op):
    """x * sigmoid(x) as one op, the sigmoid kept unrounded."""

    x = ParamDef("input")


_MONOTONE = "is monotone non-decreasing, so it commutes with max/min only"
_NOT_MONOTONE = "is not monotone (it dips below zero near the origin), so it commutes with no "

_PARTIAL_RULE = {
    ReLU: (("max", "min"), f"relu {_MONOTONE}"),
    Sigmoid: (("max", "min"), f"sigmoid {_MONOTONE}"),
    Tanh: (("max", "min"), f"tanh {_MONOTONE}"),
    Gelu: ((), f"gelu {_NOT_MONOTONE}reduction"),
    Silu: ((), f"silu {_NOT_MONOTONE}reduction"),
}
"""hir §1.3 nn: the reductions each activation provably commutes with, and why."""


def _typeinfer(op, arg_types, ctx):
    (x,) = tensor_operands(op, arg_types)
    takes_int = isinstance(op, ReLU)
    if not (x.dtype.is_float or (takes_int and x.dtype.is_int)):
        kinds = "a float or integer" if takes_int else "a float"
        raise VerifyError(f"{op_name(op)}: operand 'x' must be {kinds} tensor, got {x.dtype}")
    allowed, why = _PARTIAL_RULE[type(op)]
    refuse_partials(op, [("x", x)], allowed=allowed, why=why)
    return x


def _relation(op, arg_types):
    (x,) = tensor_operands(op, arg_types)
    return elementwise_relations(1, x.shape, [x.shape])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic: exp is only ever taken of a non-positive number. With
    e = exp(-|x|) in [0, 1], it is 1 / (1 + e) where x >= 0 and e / (1 + e) elsewhere. The
    numerator is max(e, [x >= 0]): exactly 1 where x >= 0 (as e <= 1), exactly e elsewhere (as
    e >= 0), NaN for NaN; so the values are the two-branch `where`'s, bit for bit, computed
    without a masked select (slow on unpredictable signs) or its two full-size branches. `e`
    is written into an array of x's shape: a ufunc of a rank-0 array returns a scalar, which
    the in-place steps could not write into."""
    e = np.abs(x, out=np.empty_like(x))
    np.negative(e, out=e)
    np.exp(e, out=e)
    denominator = 1.0 + e
    np.maximum(e, x >= 0, out=e)
    return np.divide(e, denominator, out=e)


def _silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), the product written over the sigmoid's own (fresh) array."""
    sigmoid = _sigmoid(x)
    return np.multiply(x, sigmoid, out=sigmoid)


_GELU_C = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x**3)))


_KERNELS = {
    ReLU: lambda x: np.maximum(x, np.zeros((), x.dtype)),
    Sigmoid: _sigmoid,
    Tanh: np.tanh,
    Gelu: _gelu_tanh,
    Silu: _silu,
}


def _eval(op, args, out_type):
    (x,) = args
    return compute_in_f32(_KERNELS[type(op)], out_type.dtype, np.asarray(x))


_SURFACE = {ReLU: "relu", Sigmoid: "sigmoid", Tanh: "tanh", Gelu: "gelu", Silu: "silu"}

for _cls, _name in _SURFACE.items():
    register_typeinfer(_cls)(_typeinfer)
    register_access_relation(_cls)(_relation)
    register_eval(_cls)(_eval)
    register_surface(_name, _cls)


def _relu_derivative(ad, x, y):
    zero = ad.scalar(0.0, x)
    return ad.tf.where(ad.tf.cmp_gt(x, zero), ad.scalar(1.0, x), zero)


def _silu_derivative(ad, x, y):
    """d(x s)/dx = s (1 + x (1 - s)), s = sigmoid(x)."""
    tf = ad.tf
    s = tf.sigmoid(x)
    return tf.mul(s, tf.add(tf.mul(x, tf.sub(1.0, s)), 1.0))


def _gelu_derivative(ad, x, y):
    """d/dx of 0.5 x (1 + t), t = tanh(c (x + 0.044715 x^3)):
    0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 * 0.044715 x^2)."""
    tf = ad.tf
    squared = tf.mul(x, x)
    t = tf.tanh(tf.mul(tf.add(tf.mul(tf.mul(squared, x), 0.044715), x), _GELU_C))
    slope = tf.mul(tf.add(tf.mul(squared, 3 * 0.044715), 1.0), _GELU_C)
    inner = tf.mul(tf.mul(tf.sub(1.0, tf.mul(t, t)), slope), tf.mul(x, 0.5))
    return tf.add(tf.mul(tf.add(t, 1.0), 0.5), inner)


_DERIVATIVES = {
    ReLU: _relu_derivative,  # 0 at 0, as JAX
    Sigmoid: lambda ad, x, y: ad.tf.mul(y, ad.tf.sub(1.0, y)),
    Tanh: lambda ad, x, y: ad.tf.sub(1.0, ad.tf.mul(y, y)),
    Gelu: _gelu_derivative,
    Silu: _silu_derivative,
}
"""dy/dx of each activation, written on the forward input x and result y."""


def _vjp(call, ct, ad):
    (x,) = call.args
    return (lambda: ad.tf.mul(ct, _DERIVATIVES[type(call.target)](ad, x, call)),)


for _cls in _DERIVATIVES:
    register_vjp(_cls)(_vjp)
register_fusion_kind(ReLU, FusionKind.ELEMENTWISE)
register_fusion_kind(Sigmoid, FusionKind.ELEMENTWISE)
register_fusion_kind(Tanh, FusionKind.ELEMENTWISE)
register_fusion_kind(Gelu, FusionKind.ELEMENTWISE)
register_fusion_kind(Silu, FusionKind.ELEMENTWISE)


def _validation_samples(cls: type[Op]) -> list[Sample]:
    op = cls()
    return [Sample(op, (operand(4, 8),)), Sample(op, (operand(8, 4, 4),), "rank 3", False)]


for _activation in (ReLU, Sigmoid, Tanh, Gelu, Silu):
    register_validation_samples(_activation)(partial(_validation_samples, _activation))


def _sigmoid_value(x: Value) -> Value:
    """The kernel's overflow-free logistic, op for op."""
    e = (-x.unary("abs")).unary("exponential")
    return (x >= 0.0).select(1.0 / (1.0 + e), e / (1.0 + e))


_LOWERINGS = {
    ReLU: lambda x: x.maximum(0),
    Sigmoid: _sigmoid_value,
    Tanh: lambda x: x.unary("tanh"),
    Gelu: lambda x: 0.5 * x * (1.0 + (_GELU_C * (x + 0.044715 * (x * x * x))).unary("tanh")),
    Silu: lambda x: x * _sigmoid_value(x),
}


def _stablehlo(op, operands, arg_types, out_type, lw):
    """Decomposed in f32 for narrow floats and rounded once; Silu's sigmoid stays unrounded."""
    x = Value.of(lw, operands[0], arg_types[0])
    return _LOWERINGS[type(op)](x.widened()).convert(x.dtype).name


for _cls in _SURFACE:
    register_stablehlo(_cls)(_stablehlo)


def _pallas_kernels(kx) -> dict:
    """The reference kernels above, spelled in jnp (the same overflow-free logistic)."""
    jnp = kx.jnp

    def sigmoid(x):
        e = jnp.exp(-jnp.abs(x))
        return jnp.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)

    return {
        ReLU: lambda x: kx.maximum(x, jnp.zeros((), x.dtype)),
        Sigmoid: sigmoid,
        Tanh: jnp.tanh,
        Gelu: lambda x: 0.5 * x * (1.0 + jnp.tanh(_GELU_C * (x + 0.044715 * x**3))),
        Silu: lambda x: x * sigmoid(x),
    }


def _pallas(op, args, arg_types, out_type, kx):
    (x,) = args
    return kx.in_f32(_pallas_kernels(kx)[type(op)], out_type.dtype, x)


for _cls in _SURFACE:
    register_pallas(_cls)(_pallas)
