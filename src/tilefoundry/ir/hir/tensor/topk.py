"""TopK: the k greatest (or least) elements along one axis, as (values, indices) (hir §1.3 TopK).

k is a ShapeDim, so a context-dependent k such as `dim_min(512, CTX // 4)` is the selected axis's
symbolic length in the result, not a pad-and-mask. The seed checks k against the axis only where
that is decidable statically and fails open elsewhere; the kernel checks every resolved k.

Kernel ordering: ties are broken by the lower index first, in both directions (a stable sort), so
results are deterministic; `sorted=False` allows any order and gets that same sorted order. The
Pallas rule reaches that order without a sort (no GPU lowering has one): by ranks.
"""

from __future__ import annotations

import islpy as isl
import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, AffineAccess, BoundaryRelation
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    normalize_axis,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value, iota
from tilefoundry.ir.types import (
    DimVar,
    TensorType,
    TupleType,
    dim_upper_bound,
    dim_vars,
    format_dim,
    i64,
    is_static,
    normalize_dim,
    resolve_dim,
)
from tilefoundry.ir.types.shard import with_strides
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.ir.types.shard.mesh import c_order_strides
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

__all__ = ["TopK"]


class TopK(Op):
    """`k` is any attribute value here; typeinfer enforces the ShapeDim contract (seed)."""

    x = ParamDef("input")
    k = ParamDef("attribute")
    axis = ParamDef("attribute", int, default=-1)
    largest = ParamDef("attribute", bool, default=True)
    sorted = ParamDef("attribute", bool, default=True)


def _checked_k(op: TopK, x: TensorType, axis: int):
    """k's seed contract: a ShapeDim, non-negative when static, at most the axis length whenever
    both sides (or k's static upper bound) are known, and resolvable from x's own shape."""
    try:
        k = normalize_dim(op.k, what="k")
    except VerifyError as err:
        raise VerifyError(f"{op_name(op)}: {err.message}") from None
    if is_static(k) and k < 0:
        raise VerifyError(f"{op_name(op)}: k must be non-negative, got {k}")
    length = x.shape[axis]
    bound = k if is_static(k) else dim_upper_bound(k)
    if is_static(length) and bound is not None and bound > length:
        raise VerifyError(
            f"{op_name(op)}: k = {format_dim(k)} can reach {bound}, more than the length "
            f"{length} of axis {axis}; choose k <= {length}"
        )
    known = {v for extent in x.shape for v in dim_vars(extent)}
    shape = ", ".join(format_dim(e) for e in x.shape)
    for var in dim_vars(k):
        if var not in known:
            raise VerifyError(
                f"{op_name(op)}: k = {format_dim(k)} uses DimVar {var.name}, which does not "
                f"appear in x's shape [{shape}], so k cannot be resolved where TopK evaluates; "
                "derive k from x's own extents"
            )
    return k


def _refuse_split_axis(op: TopK, x: TensorType, axis: int) -> None:
    for mesh_axis, (split_axis, _, _) in split_owners(op_name(op), x).items():
        if split_axis == axis:
            label = x.layout.mesh.axes[mesh_axis].label
            raise VerifyError(
                f"{op_name(op)}: the selected axis {axis} is Split on {label}; a top-k over a "
                f"split axis needs every device's candidates; insert reshard(x, ...) to "
                f"Broadcast on {label} first"
            )


@register_typeinfer(TopK)
def _typeinfer(op: TopK, arg_types, ctx) -> TupleType:
    (x,) = tensor_operands(op, arg_types)
    if x.rank == 0:
        raise VerifyError(f"{op_name(op)}: x is a scalar; TopK selects along an axis")
    axis = normalize_axis(op, op.axis, x.rank)
    k = _checked_k(op, x, axis)
    refuse_partials(
        op,
        [("x", x)],
        why="indices name the winning position, which a per-device addend cannot recover "
        "(it would need a paired value and device-identity reduction)",
    )
    _refuse_split_axis(op, x, axis)
    shape = tuple(k if i == axis else e for i, e in enumerate(x.shape))
    layout = propagate(op, arg_types, shape)
    if layout is not None and layout.layout.stride is None:
        layout = with_strides(layout, c_order_strides(flatten(layout.shape)))
    storage = result_storage(op, [x])
    return TupleType(
        (TensorType(shape, x.dtype, layout, storage), TensorType(shape, i64, layout, storage))
    )


@register_access_relation(TopK)
def _relation(op: TopK, arg_types) -> AccessRelations:
    """Domain = x's coordinates plus one output position `k` on the selected axis: every output
    position reads the whole selected axis (a reduction dim for the output), the other axes are
    projections."""
    rank = len(arg_types[0].shape)
    axis = normalize_axis(op, op.axis, rank) if rank else 0
    dims = [f"d{i}" for i in range(rank + 1)]
    out = [f"d{rank}" if i == axis else f"d{i}" for i in range(rank)]

    def access(exprs):
        return BoundaryRelation(
            AffineAccess(isl.Map(f"{{ [{', '.join(dims)}] -> [{', '.join(exprs)}] }}"))
        )

    output = access(out)
    return AccessRelations((access(dims[:rank]),), (output, output))


def _resolved_k(op: TopK, x: np.ndarray, axis: int, out_type: TupleType) -> int:
    """k from the result type; a symbolic k is resolved by binding the DimVars the result type
    shares with x's actual extents on the other axes (the evaluator may also hand a resolved
    type)."""
    shape = out_type.fields[0].shape
    k = shape[axis]
    if is_static(k):
        return int(k)
    bindings = {e: x.shape[i] for i, e in enumerate(shape) if i != axis and isinstance(e, DimVar)}
    try:
        return resolve_dim(k, bindings)
    except VerifyError as err:
        raise EvalError(f"TopK: cannot resolve k = {format_dim(k)}: {err.message}") from None


@register_eval(TopK)
def _eval(op: TopK, args, out_type):
    (x,) = args
    x = np.asarray(x)
    axis = op.axis % x.ndim
    k = _resolved_k(op, x, axis, out_type)
    length = x.shape[axis]
    if not 0 <= k <= length:
        raise EvalError(f"TopK: k = {k} is outside [0, {length}] for axis {axis} of {x.shape}")
    narrow_float = x.dtype.kind not in "biu" and x.dtype.itemsize < 4
    keys = x.astype(np.float32) if narrow_float else x
    if op.largest:
        reversed_order = np.argsort(np.flip(keys, axis), axis=axis, kind="stable")
        order = length - 1 - np.flip(reversed_order, axis)
    else:
        order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    values = np.take_along_axis(x, indices, axis=axis)
    return values, indices.astype(np.int64)


register_surface("topk", TopK)
register_fusion_kind(TopK, FusionKind.BARRIER)
register_validation_samples(TopK)(lambda: [Sample(TopK(k=2, axis=-1), (operand(4, 8),))])


@register_vjp(TopK)
def _vjp(call, ct, ad):
    """Each selected value's cotangent goes back to the position it was taken from: a
    scatter_add into zeros at the indices (a take-along-axis, so a gather batched over every
    other axis, with the selected axis moved last); the indices carry none (an integer
    output). Ties select one position (the kernel's lower index first), as in JAX."""
    tf = ad.tf
    (x,) = call.args
    rank = x.type.rank
    axis = normalize_axis(call.target, call.target.axis, rank)

    def d_x():
        indices = tf.tuple_get_item(call, index=1)
        scattered = tf.scatter_add(
            ad.zeros_like(ad.axis_last(x, axis)),
            ad.axis_last(indices, axis),
            ad.axis_last(ct[0], axis),
            axis=rank - 1,
            batch_dims=rank - 1,
        )
        return ad.axis_back(scattered, axis)

    return (d_x,)


def _sort_keys(x: Value) -> Value:
    """The kernel's sort keys, made safe for a TOTALORDER comparison: narrow floats in f32, -0
    folded into +0 and every NaN made +NaN, so that (as in numpy) the zeros tie and NaN ranks
    above +inf, and nothing else reorders."""
    keys = x.widened()
    if not keys.dtype.is_float:
        return keys
    keys = (keys == 0.0).select(keys.full(0.0), keys)
    return (keys != keys).select(keys.full(float("nan")), keys)


def _stable_sort(operands: list[Value], axis: int, descending: bool) -> list[Value]:
    """`stablehlo.sort` of the operands along `axis`, ordered by the first; stability keeps tied
    keys in index order (lower index first), in both directions."""
    keys = operands[0]
    lw = keys.lw
    kind = (
        "TOTALORDER"
        if keys.dtype.is_float
        else "UNSIGNED"
        if keys.dtype.is_unsigned or keys.dtype.is_bool
        else "SIGNED"
    )
    scalars = [lw.type(TensorType((), v.dtype)) for v in operands]
    block = [(lw.fresh(), lw.fresh()) for _ in operands]
    arguments = ", ".join(f"{a}: {t}, {b}: {t}" for (a, b), t in zip(block, scalars, strict=True))
    body = lw.child(4)
    (first, second), key_type = block[0], scalars[0]
    precedes = body.op(
        f"stablehlo.compare {'GT' if descending else 'LT'}, {first}, {second}, {kind} : "
        f"({key_type}, {key_type}) -> tensor<i1>"
    )
    body.line(f'"stablehlo.return"({precedes}) : (tensor<i1>) -> ()')
    types = ", ".join(lw.type(v.type) for v in operands)
    names = lw.op(
        f'"stablehlo.sort"({", ".join(v.name for v in operands)}) '
        f"<{{dimension = {axis} : i64, is_stable = true}}> ({{\n"
        f"{' ' * (lw.indent + 2)}^bb0({arguments}):\n"
        + "\n".join(body.lines)
        + f"\n{' ' * lw.indent}}}) : ({types}) -> ({types})",
        len(operands),
    )
    return [v._new(name) for v, name in zip(operands, names, strict=True)]


@register_stablehlo(TopK)
def _stablehlo(op: TopK, operands, arg_types, out_type, lw):
    """A stable sort of (keys, values, iota indices) along the axis, then the first k of each:
    ties keep the lower index first, as the kernel's stable argsort does."""
    x = Value.of(lw, operands[0], arg_types[0])
    axis = op.axis % x.rank
    k = lw.shape(out_type.fields[0])[axis]
    operands = [_sort_keys(x), x, iota(lw, x.shape, axis, i64)]
    _, values, indices = _stable_sort(operands, axis, descending=op.largest)
    return values.slice_axis(axis, 0, k).name, indices.slice_axis(axis, 0, k).name


@register_pallas(TopK)
def _pallas(op: TopK, args, arg_types, out_type, kx):
    """Each element's rank along the axis is the count of elements ordered before it (greater,
    or equal at a lower index; less, for `largest=False`), from one pairwise comparison; output
    position r takes the element of rank r. Keys as `_sort_keys`: narrow floats in f32, -0
    folded into +0, NaN above +inf; a float key is compared as its sign-magnitude integer, in
    which every NaN is the largest."""
    jnp, lax = kx.jnp, kx.lax
    (x,) = args
    axis = op.axis % x.ndim
    k = out_type.fields[0].shape[axis]
    moved = jnp.moveaxis(x, axis, -1)
    keys, n = _ordered_keys(kx, moved), moved.shape[-1]
    mine, other = keys[..., :, None], keys[..., None, :]  # element j against element i
    ahead = other > mine if op.largest else other < mine
    earlier = lax.broadcasted_iota(jnp.int32, (n, n), 1) < lax.broadcasted_iota(
        jnp.int32, (n, n), 0
    )
    rank = jnp.sum((ahead | ((other == mine) & earlier)).astype(jnp.int32), axis=-1)
    chosen = rank[..., None, :] == lax.broadcasted_iota(jnp.int32, (k, n), 0)
    positions = lax.broadcasted_iota(jnp.int32, chosen.shape, chosen.ndim - 1)
    values = kx.pick(chosen, jnp.broadcast_to(moved[..., None, :], chosen.shape), -1)
    indices = jnp.sum(jnp.where(chosen, positions, 0), axis=-1)
    return (
        jnp.moveaxis(values, -1, axis),
        jnp.moveaxis(indices, -1, axis).astype(kx.dtype(i64)),
    )


def _ordered_keys(kx, x):
    """Integers (or x itself) whose order is the kernel's order of x's elements."""
    jnp = kx.jnp
    if jnp.issubdtype(x.dtype, jnp.integer):
        return x
    if x.dtype == jnp.bool_:
        return x.astype(jnp.int32)
    keys = x.astype(jnp.float32)
    keys = jnp.where(keys == 0.0, jnp.zeros_like(keys), keys)
    bits = kx.lax.bitcast_convert_type(keys, jnp.int32)
    bits = jnp.where(keys != keys, jnp.iinfo(jnp.int32).max, bits)
    return jnp.where(bits < 0, bits ^ jnp.int32(0x7FFFFFFF), bits)
