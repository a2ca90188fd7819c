"""SoftMax(axis=-1): exp(x - max) / sum(exp(x - max)) along one axis (torch `softmax(x, dim)`).

Like the norms, softmax combines every value of its axis into each output, so that axis stays
inside one op instance: the iteration domain is x's other axes and the axis is a whole
(existential) range of both the read and the write (see `norms.whole_axis_relations`). A Split
along it fails closed, a Split elsewhere carries, and no pending reduction commutes with the
normalisation (hir §1.3 nn: SoftMax rejects any Partial operand).
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    compute_in_f32,
    computes_into,
    normalize_axis,
    op_name,
    propagate,
    refuse_partials,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import reads_except, refuse_splits_on, whole_axis_relations
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_eval_into,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand


class SoftMax(Op):
    """Normalised exponentials along `axis`."""

    x = ParamDef("input")
    axis = ParamDef("attribute", int, default=-1)


def _checked(op: SoftMax, arg_types) -> tuple[TensorType, int]:
    (x,) = tensor_operands(op, arg_types)
    if x.rank < 1:
        raise VerifyError(f"{op_name(op)}: operand 'x' must have rank >= 1, got a scalar")
    if not x.dtype.is_float:
        raise VerifyError(f"{op_name(op)}: operand 'x' must be a float tensor, got {x.dtype}")
    return x, normalize_axis(op, op.axis, x.rank)


@register_access_relation(SoftMax)
def _relation(op, arg_types, *, exists: bool = True):
    x, axis = _checked(op, arg_types)
    reads = reads_except(x.rank, {axis})
    return whole_axis_relations(x.rank - 1, [reads], [reads], exists=exists)


@register_typeinfer(SoftMax)
def _typeinfer(op, arg_types, ctx):
    x, axis = _checked(op, arg_types)
    why = f"softmax normalises across axis {axis} (a non-monotonic combination of its values)"
    refuse_partials(op, [("x", x)], why=f"{why}, so no reduction commutes")
    refuse_splits_on(op, [("x", x, {axis})], f"{why}, so one op instance must see that whole axis")
    layout = propagate(op, (x,), x.shape, relations=_relation(op, (x,), exists=False))
    return TensorType(x.shape, x.dtype, layout, x.storage)


def _softmax_into(x: np.ndarray, axis: int, out: np.ndarray | None = None) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along `axis`, each step written over the previous one's
    array (`out`, which may be x itself, else a fresh one): the same three elementwise passes and
    two reductions as the naive formula, in one buffer. `initial` makes an empty axis legal; a
    row of only -inf gives nan, as torch does."""
    shift = np.max(x, axis=axis, keepdims=True, initial=-np.inf)
    with np.errstate(invalid="ignore"):
        e = np.subtract(x, shift, out=out)
        np.exp(e, out=e)
        return np.divide(e, np.sum(e, axis=axis, keepdims=True), out=e)


def _softmax(axis: int):
    def kernel(x: np.ndarray) -> np.ndarray:
        return _softmax_into(x, axis)

    return kernel


@register_eval(SoftMax)
def _eval(op, args, out_type):
    (x,) = args
    x = np.asarray(x)
    axis = normalize_axis(op, op.axis, x.ndim)
    return compute_in_f32(_softmax(axis), out_type.dtype, x)


@register_eval_into(SoftMax)
def _eval_into(op, args, out_type, out):
    """`_eval` written into `out` when x is already of out's float dtype (nothing to widen)."""
    x = np.asarray(args[0])
    if not computes_into(out, x):
        return None
    return _softmax_into(x, normalize_axis(op, op.axis, x.ndim), out)


register_surface("softmax", SoftMax)


@register_vjp(SoftMax)
def _vjp(call, ct, ad):
    """dx = y (ct - sum(ct y)) along the axis, y the forward result."""
    tf = ad.tf
    y = call
    along = tf.reduce(tf.mul(ct, y), axes=(call.target.axis,), keepdim=True, kind="sum")
    return (lambda: tf.mul(y, tf.sub(ct, along)),)


register_fusion_kind(SoftMax, FusionKind.REDUCTION)


@register_validation_samples(SoftMax)
def _validation_samples() -> list[Sample]:
    return [
        Sample(SoftMax(axis=-1), (operand(4, 8),), "last axis"),
        Sample(SoftMax(axis=0), (operand(4, 8),), "axis 0", False),
    ]


@register_stablehlo(SoftMax)
def _stablehlo(op, operands, arg_types, out_type, lw):
    """exp(x - max) / sum, statistics reduced along the axis and broadcast back; the max starts
    at -inf like the kernel's `initial`, and narrow floats run in f32."""
    x = Value.of(lw, operands[0], arg_types[0])
    axis = normalize_axis(op, op.axis, x.rank)
    wide = x.widened()
    e = (wide - wide.reduce_keep(axis, "maximum", -np.inf)).unary("exponential")
    return (e / e.reduce_keep(axis, "add", 0.0)).convert(x.dtype).name


@register_pallas(SoftMax)
def _pallas(op, args, arg_types, out_type, kx):
    """The reference kernel in jnp: shift by the row max, exponentiate, normalise."""
    (x,) = args
    jnp = kx.jnp
    axis = normalize_axis(op, op.axis, x.ndim)

    def kernel(a):
        e = jnp.exp(a - jnp.max(a, axis=axis, keepdims=True, initial=-jnp.inf))
        return e / jnp.sum(e, axis=axis, keepdims=True)

    return kx.in_f32(kernel, out_type.dtype, x)
