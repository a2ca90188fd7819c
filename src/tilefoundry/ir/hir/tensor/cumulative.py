"""Cumulative: the running sum / product / max / min along one axis (numpy `cumsum`, `cumprod`,
`maximum.accumulate`, `minimum.accumulate`; jax `lax.cumsum` and friends, `reverse` included).

Each output element combines a prefix (a suffix when `reverse`) of its axis, so the scanned axis
is a whole (existential) axis of the relation (`whole_axis`): a device holding part of it lacks
the other devices' running value, so a Split there fails closed; a Split on another axis carries.
A pending reduction carries exactly when it is the scan's own combiner: a prefix sum of addends
is the sum of their prefix sums, and a running max of per-device values is the max of their
running maxes (likewise min); nothing commutes with a running product, and no other pairing holds
(cumsum(max(a, b)) != max(cumsum(a), cumsum(b))).

Numerics: integers wrap in their dtype at each step (numpy with `dtype=` and XLA agree); narrow
floats accumulate in f32 and round once, as every reference kernel does. The StableHLO lowering
is a `reduce_window` whose window spans the axis, padded before (after, for `reverse`) with the
combiner's identity: what `jax.jit(jnp.cumsum)` lowers to on CPU (jax 0.10.2).
"""

from __future__ import annotations

import enum

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    compute_in_f32,
    normalize_axis,
    numpy_dtype,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import reads_except, refuse_splits_on, whole_axis_relations
from tilefoundry.ir.lowering.values import Value, running
from tilefoundry.ir.types import DType, TensorType, format_dim, i32, is_static
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


class CumulativeKind(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"


class Cumulative(Op):
    """The running `kind` of `x` along `axis`, from the end when `reverse`."""

    x = ParamDef("input")
    axis = ParamDef("attribute", int)
    kind = ParamDef("attribute", CumulativeKind, default=CumulativeKind.SUM)
    reverse = ParamDef("attribute", bool, default=False)


_COMMUTES = {
    CumulativeKind.SUM: ("sum",),
    CumulativeKind.PROD: (),
    CumulativeKind.MAX: ("max",),
    CumulativeKind.MIN: ("min",),
}


def _checked(op: Cumulative, arg_types) -> tuple[TensorType, int]:
    (x,) = tensor_operands(op, arg_types)
    if x.rank == 0:
        raise VerifyError(
            f"{op_name(op)}: operand 'x' is a rank-0 scalar; there is no axis to scan"
        )
    if x.dtype.is_bool:
        raise VerifyError(
            f"{op_name(op)}: operand 'x' is bool, which has no running {op.kind.value}; insert "
            "cast(x, i32) first"
        )
    return x, normalize_axis(op, op.axis, x.rank)


@register_typeinfer(Cumulative)
def _typeinfer(op: Cumulative, arg_types, ctx) -> TensorType:
    x, axis = _checked(op, arg_types)
    allowed = _COMMUTES[op.kind]
    refuse_partials(
        op,
        (("x", x),),
        allowed=allowed,
        why=f"a running {op.kind.value} commutes only with a pending "
        f"{' or '.join(allowed) if allowed else 'nothing'}",
    )
    refuse_splits_on(
        op,
        (("x", x, {axis}),),
        f"the running {op.kind.value} along it needs every earlier element of the axis",
    )
    layout = propagate(op, (x,), x.shape, relations=_relation(op, (x,), exists=False))
    return TensorType(x.shape, x.dtype, layout, result_storage(op, (x,)))


@register_access_relation(Cumulative)
def _relation(op: Cumulative, arg_types, *, exists: bool = True):
    """Domain = the other axes; the scanned axis is read and written whole by an instance."""
    x, axis = _checked(op, arg_types)
    reads = reads_except(x.rank, {axis})
    return whole_axis_relations(x.rank - 1, [reads], [reads], exists=exists)


_KERNELS = {
    CumulativeKind.SUM: lambda a, axis: np.cumsum(a, axis, dtype=a.dtype),
    CumulativeKind.PROD: lambda a, axis: np.cumprod(a, axis, dtype=a.dtype),
    CumulativeKind.MAX: np.maximum.accumulate,
    CumulativeKind.MIN: np.minimum.accumulate,
}


@register_eval(Cumulative)
def _eval(op: Cumulative, args, out_type: TensorType) -> np.ndarray:
    x = np.asarray(args[0])
    axis = normalize_axis(op, op.axis, x.ndim)
    kernel = _KERNELS[op.kind]

    def scan(a: np.ndarray) -> np.ndarray:
        if not op.reverse:
            return kernel(a, axis)
        return np.flip(kernel(np.flip(a, axis), axis), axis)

    with np.errstate(over="ignore", invalid="ignore"):
        return compute_in_f32(scan, out_type.dtype, x)


_SURFACE_NAMES = {
    "cumsum": CumulativeKind.SUM,
    "cumprod": CumulativeKind.PROD,
    "cummax": CumulativeKind.MAX,
    "cummin": CumulativeKind.MIN,
}
for _name, _kind in _SURFACE_NAMES.items():
    register_surface(_name, Cumulative, kind=_kind)
register_fusion_kind(Cumulative, FusionKind.BARRIER)


@register_validation_samples(Cumulative)
def _validation_samples() -> list[Sample]:
    samples = [
        Sample(Cumulative(axis=1, kind=kind), (operand(4, 8),), kind.value)
        for kind in CumulativeKind
    ]
    reverse = Cumulative(axis=0, kind=CumulativeKind.SUM, reverse=True)
    # 3 columns: the validator's addends give element e to device (e + operand) % n, which for
    # a column count divisible by n would hand each whole column to one device (a running sum
    # of such addends cannot tell a pending max from a complete value)
    return [*samples, Sample(reverse, (operand(8, 3),), "reverse sum, axis 0", False)]


@register_vjp(Cumulative)
def _vjp(call, ct, ad):
    """cumsum: the running sum of ct taken the other way (x_j reaches every output at or after
    j). cumprod, cummax and cummin weigh each pair (j, i) of the scanned axis (`_pairwise`)."""
    op = call.target
    if op.kind is CumulativeKind.SUM:
        return (lambda: ad.tf.cumsum(ct, axis=op.axis, reverse=not op.reverse),)
    return (lambda: _pairwise(op, call, ct, ad),)


def _pairwise(op: Cumulative, y, ct, ad):
    """dx_j = sum_i w[j, i] ct_i over the outputs i that x_j reaches, on an n x n intermediate
    per scan (the scanned axis moved last, j before i):

    - cumprod: w[j, i] = prod of x_k over the prefix of i without k = j, itself a running
      product of x with x_j replaced by 1, so a zero factor is exact (JAX's answer; the
      familiar `revcumsum(ct * y) / x` divides by zero there);
    - cummax / cummin: w[j, i] = 1 where x_j is y_i, split evenly between the tied positions
      of the prefix (the convention of Reduce max and of JAX's `max` reduction; JAX's own
      cummax splits a tie unevenly, by its scan tree)."""
    tf = ad.tf
    (x,) = y.args
    rank = x.type.rank
    axis = normalize_axis(op, op.axis, rank)
    n = x.type.shape[axis]
    if not is_static(n):
        ad.refuse(
            f"the scanned axis has the symbolic extent {format_dim(n)}, and the derivative "
            f"of a running {op.kind.value} compares every pair of its positions",
            "differentiate a scan of static extent, or a cumsum",
        )
    xs, ys, cts = (ad.axis_last(v, axis) for v in (x, y, ct))
    lead = tuple(xs.type.shape[:-1])
    rows, cols = (*lead, n, 1), (*lead, 1, n)
    j, i = (tf.iota((n, n), i32, axis=a) for a in (0, 1))
    reaches = tf.cmp_le(i, j) if op.reverse else tf.cmp_ge(i, j)
    zero, one = ad.scalar(0.0, x), ad.scalar(1.0, x)
    if op.kind is CumulativeKind.PROD:
        others = tf.where(tf.cmp_eq(i, j), one, tf.reshape(xs, cols))
        products = tf.cumprod(others, axis=rank, reverse=op.reverse)
        weight = tf.where(reaches, products, zero)
    else:
        attained = tf.cmp_eq(tf.reshape(xs, rows), tf.reshape(ys, cols))
        hits = tf.where(tf.logical_and(reaches, attained), one, zero)
        weight = tf.div(hits, tf.reduce(hits, axes=(rank - 1,), keepdim=True, kind="sum"))
    dx = tf.reduce(tf.mul(weight, tf.reshape(cts, cols)), axes=(rank,), keepdim=False, kind="sum")
    return ad.axis_back(dx, axis)


def _identity(kind: CumulativeKind, dtype: DType):
    """The combiner's identity in the compute dtype (narrow floats scan in f32)."""
    if kind is CumulativeKind.SUM:
        return 0
    if kind is CumulativeKind.PROD:
        return 1
    if dtype.is_int:
        info = np.iinfo(numpy_dtype(dtype))
        return int(info.min if kind is CumulativeKind.MAX else info.max)
    return -np.inf if kind is CumulativeKind.MAX else np.inf


_COMBINERS = {
    CumulativeKind.SUM: "add",
    CumulativeKind.PROD: "multiply",
    CumulativeKind.MAX: "maximum",
    CumulativeKind.MIN: "minimum",
}


@register_stablehlo(Cumulative)
def _stablehlo(op: Cumulative, operands, arg_types, out_type, lw):
    x = Value.of(lw, operands[0], arg_types[0])
    axis = normalize_axis(op, op.axis, x.rank)
    if x.shape[axis] == 0:
        return x.name
    wide = x.widened()
    init = _identity(op.kind, wide.dtype)
    return running(wide, axis, _COMBINERS[op.kind], init, op.reverse).convert(x.dtype).name


@register_pallas(Cumulative)
def _pallas(op: Cumulative, args, arg_types, out_type, kx):
    """lax's scans; on a GPU backend, which lowers only a forward cumsum (tt.scan), the others
    compare every pair of positions (`_pairwise_scan`)."""
    (x,) = args
    axis = normalize_axis(op, op.axis, x.ndim)
    if kx.gpu and (op.kind is not CumulativeKind.SUM or op.reverse):
        shape = (*x.shape[: axis + 1], x.shape[axis], *x.shape[axis + 1 :])
        kx.check_registers(
            f"the running {op.kind.value} as a masked reduction of every pair of positions",
            shape,
            "scan a shorter block per CTA (split another axis over the cta mesh), or run it on "
            "XLA (run_xla)",
        )
        identity = _identity(op.kind, arg_types[0].dtype)
        return kx.in_f32(
            lambda a: _pairwise_scan(kx, a, axis, op.kind, op.reverse, identity), out_type.dtype, x
        )
    scan = getattr(kx.lax, f"cum{op.kind.value}")
    return kx.in_f32(lambda a: scan(a, axis=axis, reverse=op.reverse), out_type.dtype, x)


def _pairwise_scan(kx, x, axis: int, kind: CumulativeKind, reverse: bool, identity):
    """out[i] = the `kind` of x[j] over the j that reach i (j <= i; j >= i when `reverse`), as
    x broadcast to [.., n_j, n_i, ..], the other j masked to the identity and reduced over j:
    max and min exactly (a NaN reached makes the result NaN, which the GPU's NaN-dropping max
    would lose, so it is counted apart); a sum in reduction-tree order (rounding differs from
    the sequential oracle's in the last bits: each output is a sum of at most n terms); the
    product by a tree of halves multiplied (Triton has no product reduction; exact for
    integers, whose wrapping product is associative)."""
    jnp, lax = kx.jnp, kx.lax
    n = x.shape[axis]
    pairs_shape = (*x.shape[: axis + 1], n, *x.shape[axis + 1 :])
    pairs = jnp.broadcast_to(jnp.expand_dims(x, axis + 1), pairs_shape)
    j = lax.broadcasted_iota(jnp.int32, pairs_shape, axis)
    i = lax.broadcasted_iota(jnp.int32, pairs_shape, axis + 1)
    reaches = j >= i if reverse else j <= i
    masked = jnp.where(reaches, pairs, jnp.asarray(identity, x.dtype))
    if kind is CumulativeKind.PROD:
        return lax.squeeze(_product_tree(lax, masked, axis), (axis,))
    if kind is CumulativeKind.SUM:
        return jnp.sum(masked, axis=axis)
    extreme = (jnp.max if kind is CumulativeKind.MAX else jnp.min)(masked, axis=axis)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return extreme
    nans = jnp.sum(jnp.where(reaches & (pairs != pairs), 1, 0), axis=axis)
    return jnp.where(nans > 0, jnp.asarray(np.nan, x.dtype), extreme)


def _product_tree(lax, values, axis: int):
    """The product along `axis` (kept, of extent 1): halves multiplied until one is left, an odd
    extent's last element set aside and multiplied in after."""
    extent = values.shape[axis]
    if extent == 1:
        return values
    if extent % 2:
        rest, last = lax.split(values, (extent - 1, 1), axis)
        return _product_tree(lax, rest, axis) * last
    low, high = lax.split(values, (extent // 2, extent // 2), axis)
    return _product_tree(lax, low * high, axis)
