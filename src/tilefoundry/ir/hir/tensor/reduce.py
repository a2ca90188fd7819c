"""Reduce: mean / sum / max / abs_max over logical axes, numpy shape rule (hir §1.3 Reduce).

Sharding: a reduction over a Split axis is *completed* by this op (DESIGN §4.12: the evaluator
all-reduces there), so the split mesh axis becomes Broadcast and the kept size-1 position has
stride 0. A pending Partial on another mesh axis survives only where the kind commutes with it.

Layout decisions where the seed's "plain input layout passes through unchanged" cannot hold
literally (a kept reduced axis no longer has the input's extent): every surviving axis keeps its
layout mode and stride verbatim; a reduced axis kept by `keepdim` becomes a size-1 stride-0 mode
(as in the sharded case), and one dropped by `keepdim=False` loses its mode.

dtypes: the result keeps x's dtype. Like torch, `mean` needs a float; `sum`/`mean`/`abs_max` of
bool have no agreed meaning here and are refused (max of bool is `any`, with identity False).
"""

from __future__ import annotations

import dataclasses
import enum
import math

import ml_dtypes
import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, reduction_relations
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    compute_in_f32,
    is_narrow_float,
    normalize_axis,
    numpy_dtype,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import DType, TensorType, is_static
from tilefoundry.ir.types.shard import Layout, ShardLayout, with_strides
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.ir.types.shard.mesh import c_order_strides
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
from tilefoundry.rules.validation_samples import Sample, operand
from tilefoundry.sharding.shard_regroup import logical_groups

__all__ = ["Reduce", "ReduceKind", "reduce_identity"]


class ReduceKind(enum.Enum):
    MEAN = "mean"
    SUM = "sum"
    ABS_MAX = "abs_max"
    MAX = "max"


def _axes_tuple(value: object) -> tuple:
    """A lone int means one axis; lists become tuples (attributes must be hashable)."""
    return (value,) if isinstance(value, int) and not isinstance(value, bool) else value


class Reduce(Op):
    x = ParamDef("input")
    axes = ParamDef("attribute", tuple, validate=_axes_tuple)
    keepdim = ParamDef("attribute", bool, default=True)
    kind = ParamDef("attribute", ReduceKind, default=ReduceKind.MEAN)


# hir §1.3 Reduce: SUM / MEAN are linear (commute with a pending sum), MAX is the same
# associative operator as a pending max, ABS_MAX composes a nonlinear abs and commutes with none.
_COMMUTES_WITH = {
    ReduceKind.SUM: ("sum",),
    ReduceKind.MEAN: ("sum",),
    ReduceKind.MAX: ("max",),
    ReduceKind.ABS_MAX: (),
}
_WHY = {
    ReduceKind.SUM: "sum is linear, so it commutes with a pending sum only",
    ReduceKind.MEAN: "mean is linear, so it commutes with a pending sum only",
    ReduceKind.MAX: "max commutes with a pending max only",
    ReduceKind.ABS_MAX: "abs_max applies a nonlinear abs before max, so it commutes with no "
    "pending reduction",
}


def _reduced_axes(op: Reduce, rank: int) -> tuple[int, ...]:
    axes = []
    for axis in op.axes:
        normalized = normalize_axis(op, axis, rank, "reduction axis")
        if normalized in axes:
            raise VerifyError(f"{op_name(op)}: axis {axis} is listed twice in axes={op.axes}")
        axes.append(normalized)
    return tuple(sorted(axes))


def _check_dtype(op: Reduce, x: TensorType, axes: tuple[int, ...]) -> None:
    kind = op.kind
    if x.dtype.is_bool and kind is not ReduceKind.MAX:
        raise VerifyError(
            f"{op_name(op)}: {kind.value} of a bool tensor is not defined; cast(x, i32) first "
            "(max of bool is supported)"
        )
    if kind is ReduceKind.MEAN and not x.dtype.is_float:
        raise VerifyError(
            f"{op_name(op)}: mean of a {x.dtype} tensor is not defined (as in torch); cast x to "
            "a float dtype first"
        )
    if kind is ReduceKind.MEAN:
        for axis in axes:
            if is_static(x.shape[axis]) and x.shape[axis] == 0:
                raise VerifyError(
                    f"{op_name(op)}: mean over axis {axis} of extent 0 has no identity (there is "
                    "nothing to divide by); reduce with kind='sum' or make the axis non-empty"
                )


def _out_shape(x: TensorType, axes: tuple[int, ...], keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if i in axes else e for i, e in enumerate(x.shape))
    return tuple(e for i, e in enumerate(x.shape) if i not in axes)


def _plain_layout(op: Reduce, x: TensorType, axes: tuple[int, ...]):
    """See the module doc: surviving modes verbatim, kept reduced modes 1:0, dropped ones gone."""
    layout = x.layout
    if layout is None:
        return None
    if not isinstance(layout, Layout):
        raise VerifyError(
            f"{op_name(op)}: x has a {type(layout).__name__} layout, whose per-axis projection "
            "is not defined; reshard x onto a plain Layout first"
        )
    modes = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    strides = layout.stride
    if strides is not None and not isinstance(strides, tuple):
        strides = (strides,)
    keep = [i for i in range(len(modes)) if i not in axes or op.keepdim]
    shape = tuple(1 if i in axes else modes[i] for i in keep)
    if strides is None:
        return Layout(shape)
    return Layout(shape, tuple(0 if i in axes else strides[i] for i in keep))


def _check_sharded_input(op: Reduce, layout: ShardLayout) -> None:
    """hir §1.3: a non-default-stride sharded input must carry explicit producer strides. A
    plain Layout's strides are explicit (or None, the default C-order); any other bound layout
    has no stride tuple to carry, so it is refused."""
    if not isinstance(layout.layout, Layout):
        raise VerifyError(
            f"{op_name(op)}: x's ShardLayout binds a {type(layout.layout).__name__}, which "
            "carries no explicit producer strides; reshard x onto a Layout with explicit "
            "strides first"
        )


def _sharded_layout(
    op: Reduce, arg_types, x: TensorType, axes: tuple[int, ...], out_shape: tuple
) -> ShardLayout | None:
    """The engine's output (reduced Splits complete to Broadcast), then stride 0 on the kept
    size-1 positions of the reduced axes that were split (hir §1.3: size-1 stride-0 output)."""
    _check_sharded_input(op, x.layout)
    out = propagate(op, arg_types, out_shape, complete_reduction_dims=frozenset(axes))
    if out is None:
        return None
    shape = flatten(out.shape)
    stride = out.layout.stride
    strides = list(flatten(stride) if stride is not None else c_order_strides(shape))
    split_axes = {axis for axis, _, _ in split_owners(op_name(op), x).values()}
    if op.keepdim:
        groups = logical_groups(out_shape, shape)
        for axis in split_axes & set(axes):
            for position in groups[axis] or ():
                strides[position] = 0
    return with_strides(out, tuple(strides))


@register_typeinfer(Reduce)
def _typeinfer(op: Reduce, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    axes = _reduced_axes(op, x.rank)
    _check_dtype(op, x, axes)
    refuse_partials(op, [("x", x)], allowed=_COMMUTES_WITH[op.kind], why=_WHY[op.kind])
    out_shape = _out_shape(x, axes, op.keepdim)
    if isinstance(x.layout, ShardLayout):
        layout = _sharded_layout(op, arg_types, x, axes, out_shape)
    else:
        layout = _plain_layout(op, x, axes)
    return TensorType(out_shape, x.dtype, layout, result_storage(op, [x]))


@register_access_relation(Reduce)
def _relation(op: Reduce, arg_types) -> AccessRelations:
    """Domain = x's coordinates; the reduced dims vanish from (keepdim: read 0 in) the output."""
    rank = len(arg_types[0].shape)
    return reduction_relations(rank, [a % rank for a in op.axes] if rank else [], op.keepdim)


def reduce_identity(kind: ReduceKind, dtype: DType) -> np.generic:
    """hir §1.3 Reduce: the value of a reduction over no elements, in the result dtype.

    max: the least value the dtype holds (-inf when it has one, the most negative finite value
    of a finite-only float such as fp8e4m3, the smallest integer, False); abs_max and sum: 0;
    mean has none. A dtype that cannot hold the identity (f8e8m0 has no zero) is an EvalError.
    """
    np_dtype = numpy_dtype(dtype)
    if kind is ReduceKind.MEAN:
        raise EvalError("Reduce: mean over no elements has no identity (nothing to divide by)")
    if kind is not ReduceKind.MAX:
        value = np.zeros((), np.float64).astype(np_dtype)
        if value.astype(np.float64) != 0:
            raise EvalError(
                f"Reduce: {kind.value} over no elements is 0, which {dtype} cannot hold"
            )
        return value[()]
    if dtype.is_bool:
        return np.bool_(False)
    if dtype.is_int:
        return np.iinfo(np_dtype).min
    negative_inf = np.array(-np.inf).astype(np_dtype)
    if np.isinf(negative_inf.astype(np.float64)):
        return negative_inf[()]
    return np.array(ml_dtypes.finfo(np_dtype).min, dtype=np_dtype)[()]


def _kernel(kind: ReduceKind, axes: tuple[int, ...], keepdim: bool, int_dtype):
    def run(a: np.ndarray) -> np.ndarray:
        if kind is ReduceKind.SUM:
            return np.sum(a, axis=axes, keepdims=keepdim, dtype=int_dtype)
        if kind is ReduceKind.MEAN:
            return np.mean(a, axis=axes, keepdims=keepdim)
        if kind is ReduceKind.MAX:
            return np.max(a, axis=axes, keepdims=keepdim)
        return np.max(np.abs(a), axis=axes, keepdims=keepdim)

    return run


@register_eval(Reduce)
def _eval(op: Reduce, args, out_type) -> np.ndarray:
    """Narrow floats accumulate in f32 and round once; integer sums stay in the int dtype (they
    wrap like the hardware would; abs of the most negative integer wraps too, as in torch). An
    empty reduction returns the kind's identity."""
    (x,) = args
    x = np.asarray(x)
    axes = tuple(sorted(a % x.ndim for a in op.axes)) if x.ndim else ()
    dtype = out_type.dtype
    shape = tuple(1 if i in axes else e for i, e in enumerate(x.shape))
    if not op.keepdim:
        shape = tuple(e for i, e in enumerate(x.shape) if i not in axes)
    if any(x.shape[a] == 0 for a in axes):
        return np.full(shape, reduce_identity(op.kind, dtype), dtype=numpy_dtype(dtype))
    int_dtype = x.dtype if dtype.is_int else None
    run = _kernel(op.kind, axes, op.keepdim, int_dtype)
    if is_narrow_float(dtype):
        return compute_in_f32(run, dtype, x)
    return np.asarray(run(x)).astype(numpy_dtype(dtype), copy=False)


_COMPLETION = {
    ReduceKind.SUM: "sum",
    ReduceKind.MEAN: "mean",
    ReduceKind.MAX: "max",
    ReduceKind.ABS_MAX: "max",
}
"""How per-device results combine when a reduced axis is Split (the complete effect): the mean
of equal blocks is the mean, and abs_max of blocks is the max of their abs_max."""


@register_sharded_eval(Reduce)
def _sharded_eval(op: Reduce, args, call):
    return call.run_blocks(complete=_COMPLETION[op.kind])


@register_spmd_lowering(Reduce)
def _spmd_lowering(op: Reduce, operands, call):
    """A reduction over a Split axis is the local reduction plus an all-reduce. A mean is the
    sum of the local sums over the global count, so every device divides once by the same
    number (a mean of local means would round twice)."""
    if op.kind is not ReduceKind.MEAN:
        return call.run_blocks(complete=_COMPLETION[op.kind])
    if not call.completes():
        return call.run_blocks()
    local_sum = Reduce(axes=op.axes, keepdim=op.keepdim, kind=ReduceKind.SUM)
    total = call.run_blocks(complete="sum", local_op=local_sum)
    x = call.arg_types[0]
    shape = call.lw.shape(x)
    count = math.prod(shape[a] for a in _reduced_axes(op, len(shape)))
    mean = (call.value(total).widened() / float(count)).convert(total.local.dtype)
    return dataclasses.replace(total, name=mean.name)


register_surface("reduce", Reduce)
register_fusion_kind(Reduce, FusionKind.REDUCTION)


@register_vjp(Reduce)
def _vjp(call, ct, ad):
    """sum spreads the cotangent over the reduced axes, mean spreads it divided by the count,
    and max / abs_max send it to the maximal elements, split evenly between ties (as JAX)."""
    tf = ad.tf
    op = call.target
    (x,) = call.args
    axes = _reduced_axes(op, x.type.rank)
    kept = _out_shape(x.type, axes, keepdim=True)
    shape = tuple(x.type.shape)

    def spread(value):
        value = value if op.keepdim else tf.reshape(value, kept)
        return tf.broadcast_to(value, shape)

    if op.kind is ReduceKind.SUM:
        return (lambda: spread(ct),)
    if op.kind is ReduceKind.MEAN:
        count = math.prod(shape[a] for a in axes)
        return (lambda: spread(tf.div(ct, float(count))),)

    def to_extrema():
        magnitude = tf.abs(x) if op.kind is ReduceKind.ABS_MAX else x
        zero, one = ad.scalar(0.0, x), ad.scalar(1.0, x)
        hits = tf.where(tf.cmp_eq(magnitude, spread(call)), one, zero)
        share = tf.div(hits, tf.reduce(hits, axes=axes, keepdim=True, kind="sum"))
        if op.kind is ReduceKind.ABS_MAX:
            share = tf.mul(share, tf.where(tf.cmp_lt(x, zero), ad.scalar(-1.0, x), one))
        return tf.mul(spread(ct), share)

    return (to_extrema,)


@register_validation_samples(Reduce)
def _validation_samples() -> list[Sample]:
    """Per kind, since each completes a Partial differently: one axis, keepdim, and all axes."""
    x = (operand(4, 8),)
    samples = []
    for kind in ReduceKind:
        samples += [
            Sample(Reduce(axes=(1,), keepdim=False, kind=kind), x, f"{kind.value} axis 1"),
            Sample(Reduce(axes=(0,), keepdim=True, kind=kind), x, f"{kind.value} axis 0"),
            Sample(Reduce(axes=(0, 1), keepdim=False, kind=kind), x, "all axes", False),
        ]
    return samples


_COMBINERS = {
    ReduceKind.SUM: "add",
    ReduceKind.MEAN: "add",
    ReduceKind.MAX: "maximum",
    ReduceKind.ABS_MAX: "maximum",
}


@register_stablehlo(Reduce)
def _stablehlo(op: Reduce, operands, arg_types, out_type, lw):
    """A typed-init `stablehlo.reduce` (add from 0, max from the dtype's least value), mean as
    sum then divide, abs_max as max of abs; narrow floats accumulate in f32 and round once, and
    keepdim is a reshape. An empty reduction is the kind's identity as a constant, as in the
    kernel: abs_max's is 0, but a non-empty one starts from the least value so that abs of the
    most negative integer (which wraps) still wins, as np.max(np.abs(x)) lets it."""
    x = Value.of(lw, operands[0], arg_types[0])
    axes = _reduced_axes(op, x.rank)
    dtype = out_type.dtype
    shape = lw.shape(out_type)
    if any(x.shape[a] == 0 for a in axes):
        return lw.constant(reduce_identity(op.kind, dtype), dtype, shape)
    wide = x.widened() if is_narrow_float(dtype) else x
    if op.kind is ReduceKind.ABS_MAX and not dtype.is_unsigned:
        wide = wide.unary("abs")
    if op.kind in (ReduceKind.SUM, ReduceKind.MEAN):
        init = 0
    else:
        init = reduce_identity(ReduceKind.MAX, dtype)
    result = wide.reduce(axes, _COMBINERS[op.kind], init)
    if op.kind is ReduceKind.MEAN:
        result = result / float(math.prod(x.shape[a] for a in axes))
    return result.convert(dtype).reshape(shape).name


@register_pallas(Reduce)
def _pallas(op: Reduce, args, arg_types, out_type, kx):
    """The reference kernel in jnp: narrow floats accumulate in f32, integer sums stay in their
    dtype, an empty reduction gives the kind's identity."""
    (x,) = args
    jnp = kx.jnp
    axes = tuple(sorted(a % x.ndim for a in op.axes)) if x.ndim else ()
    if any(x.shape[a] == 0 for a in axes):
        identity = reduce_identity(op.kind, out_type.dtype)
        return jnp.full(out_type.shape, identity, kx.dtype(out_type.dtype))
    integer = jnp.issubdtype(x.dtype, jnp.integer)

    def run(a):
        if op.kind is ReduceKind.SUM:
            return jnp.sum(a, axis=axes, keepdims=op.keepdim, dtype=a.dtype if integer else None)
        if op.kind is ReduceKind.MEAN:
            return jnp.mean(a, axis=axes, keepdims=op.keepdim)
        if op.kind is ReduceKind.MAX:
            return kx.max(a, axes, op.keepdim)
        return kx.max(jnp.abs(a), axes, op.keepdim)

    return kx.in_f32(run, out_type.dtype, x)


@register_pallas_sharded(Reduce)
def _pallas_sharded(op: Reduce, args, call):
    """Each CTA reduces its own block; a reduction across CTAs is refused by the exit."""
    return call.run_blocks()
