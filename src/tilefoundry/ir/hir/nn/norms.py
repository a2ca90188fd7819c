"""LayerNorm and RMSNorm over the last axis, and the whole-axis relation they share with SoftMax.

Both normalise across the last axis: every output element depends on that axis's full mean (of
values, or of squares). hir §1.3 RMSNorm fixes how the relation says so: the normalised axis
"MUST stay inside a single op instance: it is never an iteration-domain axis of its own, only an
existential range that both the read and the write cover in full". So the iteration domain is
x's *other* axes, and x, weight, bias and the output read/write the normalised axis through a
free (existential) output variable: `{ [d0, d1] -> [d0, d1, w2] }`.

The shared propagation engine reads only single-valued maps, and such a map is not one. Its
answer is still well defined once no input is Split along a whole axis, which these ops refuse
first anyway (a device holding part of the axis cannot compute its mean): with that settled, the
engine is given the same maps with the free variable pinned to 0 (`shard view`), which binds no
domain dim, so every other axis propagates exactly as the registered relation says.

LayerNorm follows torch `layer_norm(x, normalized_shape=x.shape[-1:], weight, bias, eps)`: the
normalised shape is the last axis only, and the affine weight and bias are required inputs.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    check_eps,
    compute_in_f32,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import reads_except, refuse_splits_on, whole_axis_relations
from tilefoundry.ir.lowering.values import Value
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

# ---------------------------------------------------------------------------------------------
# The ops


class LayerNorm(Op):
    """(x - mean) / sqrt(var + eps) * weight + bias over x's last axis (biased variance)."""

    x = ParamDef("input")
    weight = ParamDef("input")
    bias = ParamDef("input")
    eps = ParamDef("attribute", float, default=1e-5, validate=check_eps)


class RMSNorm(Op):
    """x / sqrt(mean(x ** 2) + eps) * weight over x's last axis."""

    x = ParamDef("input")
    weight = ParamDef("input")
    eps = ParamDef("attribute", float, default=1e-6, validate=check_eps)


_NORMALISES = "{} normalises across the last axis (a non-monotonic combination of its values)"


def _check_operands(op: Op, arg_types) -> tuple[TensorType, ...]:
    """x has rank >= 1 and a float dtype; every affine input is rank-1 of x's last extent."""
    operands = tensor_operands(op, arg_types)
    x, *affine = operands
    names = type(op).inputs()
    if x.rank < 1:
        raise VerifyError(f"{op_name(op)}: operand 'x' must have rank >= 1, got a scalar")
    dtype = same_dtype(op, list(zip(names, operands, strict=True)))
    if not dtype.is_float:
        raise VerifyError(f"{op_name(op)}: operands must be float tensors, got {dtype}")
    for name, type_ in zip(names[1:], affine, strict=True):
        if type_.rank != 1 or type_.shape[0] != x.shape[-1]:
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' must be rank-1 of x's last extent "
                f"[{x.shape[-1]}], got shape {list(type_.shape)}"
            )
    return operands


def _relations(op, arg_types, *, exists: bool = True) -> AccessRelations:
    x, *affine = _check_operands(op, arg_types)
    last = x.rank - 1
    x_reads = reads_except(x.rank, {last})
    inputs = [x_reads] + [(None,)] * len(affine)
    return whole_axis_relations(last, inputs, [x_reads], exists=exists)


def _typeinfer(op, arg_types, ctx):
    operands = _check_operands(op, arg_types)
    x = operands[0]
    names = type(op).inputs()
    why = _NORMALISES.format(op_name(op))
    refuse_partials(op, zip(names, operands, strict=True), why=f"{why}, so no reduction commutes")
    last_axes = [{x.rank - 1}] + [{0}] * (len(operands) - 1)
    refuse_splits_on(
        op,
        zip(names, operands, last_axes, strict=True),
        f"{why}, so one op instance must see that whole axis",
    )
    layout = propagate(op, operands, x.shape, relations=_relations(op, operands, exists=False))
    return TensorType(x.shape, x.dtype, layout, result_storage(op, operands))


def _mean_last(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis; an empty axis gives 0 rather than 0/0 (there is nothing to
    normalise, and the result is empty anyway)."""
    return np.sum(values, axis=-1, keepdims=True) / max(values.shape[-1], 1)


def _scale_into(
    buffer: np.ndarray, x: np.ndarray, norm: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """x / norm * weight, each step written over `buffer` (a dead temporary of x's shape and
    dtype) when the product keeps that dtype, else as the plain expression."""
    if np.result_type(x, weight) != buffer.dtype:
        return x / norm * weight
    np.divide(x, norm, out=buffer)
    return np.multiply(buffer, weight, out=buffer)


def _layer_norm(eps: float):
    def kernel(x, weight, bias):
        centred = x - _mean_last(x)
        squares = centred * centred
        scaled = _scale_into(squares, centred, np.sqrt(_mean_last(squares) + eps), weight)
        if scaled is squares and np.result_type(scaled, bias) == scaled.dtype:
            return np.add(scaled, bias, out=scaled)
        return scaled + bias

    return kernel


def _rms_norm(eps: float):
    def kernel(x, weight):
        squares = x * x
        return _scale_into(squares, x, np.sqrt(_mean_last(squares) + eps), weight)

    return kernel


_KERNELS = {LayerNorm: _layer_norm, RMSNorm: _rms_norm}


def _eval(op, args, out_type):
    kernel = _KERNELS[type(op)](op.eps)
    return compute_in_f32(kernel, out_type.dtype, *(np.asarray(a) for a in args))


for _cls, _name in ((LayerNorm, "layer_norm"), (RMSNorm, "rms_norm")):
    register_typeinfer(_cls)(_typeinfer)
    register_access_relation(_cls)(_relations)
    register_eval(_cls)(_eval)
    register_surface(_name, _cls)
register_fusion_kind(LayerNorm, FusionKind.REDUCTION)
register_fusion_kind(RMSNorm, FusionKind.REDUCTION)


def _mean_last_hir(ad, values):
    return ad.tf.reduce(values, axes=(-1,), keepdim=True, kind="mean")


def _normalised(ad, op, x):
    """(x's centred form, 1 / sqrt(its mean square + eps)) recomputed on the forward x."""
    tf = ad.tf
    centred = tf.sub(x, _mean_last_hir(ad, x)) if isinstance(op, LayerNorm) else x
    return centred, tf.rsqrt(tf.add(_mean_last_hir(ad, tf.mul(centred, centred)), op.eps))


def _norm_vjp(call, ct, ad):
    """With n = centred * r and g = ct * weight: dweight = sum(ct * n) and dbias = sum(ct) over
    the leading axes, dx = r (g - mean(g n) n), less mean(g) for LayerNorm (the centring)."""
    tf = ad.tf
    op = call.target
    x, weight, *_ = call.args
    centred, r = _normalised(ad, op, x)
    normalised = tf.mul(centred, r)

    def d_x():
        g = tf.mul(ct, weight)
        inner = tf.sub(g, tf.mul(normalised, _mean_last_hir(ad, tf.mul(g, normalised))))
        if isinstance(op, LayerNorm):
            inner = tf.sub(inner, _mean_last_hir(ad, g))
        return tf.mul(inner, r)

    d_weight = lambda: ad.sum_to(tf.mul(ct, normalised), weight.type.shape)  # noqa: E731
    if isinstance(op, LayerNorm):
        return d_x, d_weight, lambda: ad.sum_to(ct, call.args[2].type.shape)
    return d_x, d_weight


register_vjp(LayerNorm)(_norm_vjp)
register_vjp(RMSNorm)(_norm_vjp)

register_validation_samples(LayerNorm)(
    lambda: [Sample(LayerNorm(), (operand(4, 8), operand(8), operand(8)))]
)
register_validation_samples(RMSNorm)(lambda: [Sample(RMSNorm(), (operand(4, 8), operand(8)))])


def _mean_last_value(values: Value) -> Value:
    last = values.rank - 1
    return values.reduce_keep(last, "add", 0.0) / float(max(values.shape[-1], 1))


def _affine(weight: Value, like: Value) -> Value:
    return weight.broadcast_in_dim([like.rank - 1], like.shape)


def _layer_norm_value(op: LayerNorm, x: Value, weight: Value, bias: Value) -> Value:
    centred = x - _mean_last_value(x)
    scale = (_mean_last_value(centred * centred) + op.eps).unary("sqrt")
    return centred / scale * _affine(weight, x) + _affine(bias, x)


def _rms_norm_value(op: RMSNorm, x: Value, weight: Value) -> Value:
    scale = (_mean_last_value(x * x) + op.eps).unary("sqrt")
    return x / scale * _affine(weight, x)


_LOWERINGS = {LayerNorm: _layer_norm_value, RMSNorm: _rms_norm_value}


def _stablehlo(op, operands, arg_types, out_type, lw):
    """The kernel's formula op for op (sum / n, then sqrt and divide), in f32 for narrow floats."""
    values = [Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True)]
    result = _LOWERINGS[type(op)](op, *(v.widened() for v in values))
    return result.convert(out_type.dtype).name


for _cls in _LOWERINGS:
    register_stablehlo(_cls)(_stablehlo)


def _pallas_kernel(op, jnp):
    """The reference kernels above, spelled in jnp (same mean, same order of operations)."""

    def mean_last(values):
        return jnp.sum(values, axis=-1, keepdims=True) / max(values.shape[-1], 1)

    if isinstance(op, LayerNorm):

        def layer_norm(x, weight, bias):
            centred = x - mean_last(x)
            return centred / jnp.sqrt(mean_last(centred * centred) + op.eps) * weight + bias

        return layer_norm
    return lambda x, weight: x / jnp.sqrt(mean_last(x * x) + op.eps) * weight


def _pallas(op, args, arg_types, out_type, kx):
    return kx.in_f32(_pallas_kernel(op, kx.jnp), out_type.dtype, *args)


for _cls in _KERNELS:
    register_pallas(_cls)(_pallas)
