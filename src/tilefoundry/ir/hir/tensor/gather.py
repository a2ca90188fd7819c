"""Gather (hir tensor Gather; DESIGN §4.8): `out[c.., i.., t..] = x[c.., indices[b.., i..], t..]`.

The read position on the gathered axis is runtime data, so no affine map describes the access:
Gather registers `NO_AFFINE_RELATION` (traffic analysis charges whole tensors) and its sharding
rule is written here by hand, as the seed states it:

- Broadcast and Partial carry (a row selection is linear: gather(Σ xᵢ) == Σ gather(xᵢ), and it
  commutes with max/min just as well, each output element being one input element);
- a Split on the gathered axis becomes Partial(sum) on that mesh axis (each device holds the true
  rows it owns and contributes zero rows elsewhere), and only when it is the only Split;
- a Split on another axis carries, renumbered around the index dims;
- the output Layout is always natural C-order over the output shape, never inherited.

`indices` must be an integer tensor and replicated (the seed shards only `x`); a batched gather
(`batch_dims > 0`) over value-carrying shards fails closed. Valid indices lie in [0, extent):
out-of-range, including negative, indices are an evaluation error rather than numpy's wrap.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    mesh_axis_label,
    normalize_axis,
    op_name,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value, gather
from tilefoundry.ir.types import TensorType, format_dim
from tilefoundry.ir.types.shard import (
    Broadcast,
    Dynamic,
    Layout,
    Partial,
    ShardLayout,
    Split,
)
from tilefoundry.ir.types.shard.int_tuple import flatten, is_static, same_value
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, index_operand, operand
from tilefoundry.sharding.shard_regroup import logical_axis_of


class Gather(Op):
    """Gather `x` along `axis` at `indices`; the leading `batch_dims` axes index both."""

    x = ParamDef("input")
    indices = ParamDef("input")
    axis = ParamDef("attribute", int)
    batch_dims = ParamDef("attribute", int, default=0)


def _real_sharding(layout: object) -> bool:
    return isinstance(layout, ShardLayout) and any(
        not isinstance(a, Broadcast) for a in layout.attrs
    )


def check_indexing(op: Op, x: TensorType, indices: TensorType) -> int:
    """The normalised axis, after the seed's batch_dims and index rules, which every op indexing
    `x` at `indices` along `axis` with `batch_dims` shares (Gather, ScatterAdd)."""
    name = op_name(op)
    if not indices.dtype.is_int:
        raise VerifyError(
            f"{name}: operand 'indices' must have an integer dtype, got {indices.dtype}; insert "
            "cast(indices, i32) or cast(indices, i64)"
        )
    if x.rank == 0:
        raise VerifyError(f"{name}: operand 'x' is a rank-0 scalar; there is no axis to index")
    axis = normalize_axis(op, op.axis, x.rank)
    batch = op.batch_dims
    if not 0 <= batch <= min(axis, indices.rank):
        raise VerifyError(
            f"{name}: batch_dims {batch} must satisfy 0 <= batch_dims <= min(axis, "
            f"rank(indices)) = min({axis}, {indices.rank})"
        )
    for b in range(batch):
        if not same_value(x.shape[b], indices.shape[b]):
            raise VerifyError(
                f"{name}: batch axis {b} has extent {format_dim(x.shape[b])} in 'x' but "
                f"{format_dim(indices.shape[b])} in 'indices'; the leading batch_dims axes must "
                "be equal"
            )
    return axis


def check_index_range(op: Op, indices: np.ndarray, axis: int, extent: int) -> None:
    """Valid indices lie in [0, extent) of the global axis: a device checking only against its
    own rows would silently drop an out-of-range index as "not mine"."""
    if indices.dtype.kind not in "iu":
        raise EvalError(f"{op_name(op)}: 'indices' must be integers, got {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= extent):
        bad = indices[(indices < 0) | (indices >= extent)].flat[0]
        raise EvalError(
            f"{op_name(op)}: index {bad} is out of range for axis {axis} of extent {extent} "
            "(valid: 0..extent-1)"
        )


def _check_operands(op: Gather, x: TensorType, indices: TensorType) -> int:
    axis = check_indexing(op, x, indices)
    if _real_sharding(indices.layout):
        raise VerifyError(
            f"Gather: operand 'indices' carries the sharding {indices.layout.attrs}; only 'x' may "
            "be sharded (the seed defines no rule for sharded indices), so it fails closed; "
            "insert reshard(indices, ...) to Broadcast on every mesh axis first"
        )
    return axis


def _output_shape(x: TensorType, indices: TensorType, axis: int, batch: int) -> tuple:
    return (*x.shape[:axis], *indices.shape[batch:], *x.shape[axis + 1 :])


def _output_layout(op: Gather, x: TensorType, out_shape: tuple, axis: int, n_index: int):
    """The seed's per-mesh-axis migration of x's attrs (see the module docstring)."""
    sl = x.layout
    if not _real_sharding(sl):
        return None
    if not isinstance(sl.layout, Layout):
        raise VerifyError(
            "Gather: operand 'x' has a composed layout, from which no output layout is "
            "derivable (hir Gather); insert reshard(x, ...) to a plain layout first"
        )
    if op.batch_dims > 0:
        raise VerifyError(
            f"Gather: a batched gather (batch_dims={op.batch_dims}) over the value-carrying "
            f"sharding {sl.attrs} of operand 'x' is not supported (hir Gather); insert "
            "reshard(x, ...) to Broadcast on every mesh axis first"
        )
    layout_shape = tuple(flatten(sl.layout.shape))
    splits: dict[int, tuple[int, tuple[int, ...]]] = {}
    for mesh_axis, attr in enumerate(sl.attrs):
        label = mesh_axis_label(sl.mesh, mesh_axis)
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"Gather: operand 'x' is Dynamic on {label}; resolve it with reshard(x, ...) to "
                "Split or Broadcast first"
            )
        if isinstance(attr, Split):
            try:
                splits[mesh_axis] = logical_axis_of(
                    x.shape, layout_shape, attr.axis, "operand 'x'", label
                )
            except VerifyError as err:
                raise VerifyError(f"Gather: {err.message}") from None
    gathered = [a for a, (logical, _) in splits.items() if logical == axis]
    if gathered and len(splits) > 1:
        raise VerifyError(
            f"Gather: operand 'x' has several Splits ({sl.attrs}) and one targets the gathered "
            f"axis {axis}, which has no derivable output (hir Gather); insert reshard(x, ...) "
            f"to Broadcast on {mesh_axis_label(sl.mesh, gathered[0])} first"
        )
    return _carried_layout(sl, layout_shape, splits, out_shape, axis, n_index)


def _carried_layout(sl, layout_shape, splits, out_shape, axis, n_index) -> ShardLayout:
    """Split-carrying output axes keep the input's factors; the others are one position each."""
    attrs = [
        Partial("sum") if splits.get(a, (None,))[0] == axis else attr
        for a, attr in enumerate(sl.attrs)
    ]
    moved = {
        a: (logical if logical < axis else logical + n_index - 1, group)
        for a, (logical, group) in splits.items()
        if logical != axis
    }
    positions: list = []
    for out_axis, extent in enumerate(out_shape):
        owners = {a: group for a, (o, group) in moved.items() if o == out_axis}
        if not owners:
            positions.append(extent)
            continue
        group = next(iter(owners.values()))
        for a, _ in owners.items():
            attrs[a] = Split(len(positions) + group.index(sl.attrs[a].axis))
        positions.extend(layout_shape[k] for k in group)
    shape = tuple(positions)
    stride = c_order_strides(shape) if is_static(shape) else None
    return ShardLayout(Layout(shape, stride), tuple(attrs), sl.mesh)


@register_typeinfer(Gather)
def _typeinfer(op: Gather, arg_types, ctx) -> TensorType:
    x, indices = tensor_operands(op, arg_types)
    axis = _check_operands(op, x, indices)
    out_shape = _output_shape(x, indices, axis, op.batch_dims)
    n_index = indices.rank - op.batch_dims
    layout = _output_layout(op, x, out_shape, axis, n_index)
    return TensorType(out_shape, x.dtype, layout, result_storage(op, (x, indices)))


register_access_relation(Gather)(NO_AFFINE_RELATION)


@register_eval(Gather)
def _eval(op: Gather, args, out_type: TensorType) -> np.ndarray:
    x, indices = args
    axis, batch = op.axis % x.ndim, op.batch_dims
    check_index_range(op, indices, axis, x.shape[axis])
    n_batch = int(np.prod(x.shape[:batch], dtype=np.int64))
    out_shape = (*x.shape[:axis], *indices.shape[batch:], *x.shape[axis + 1 :])
    out = np.empty(out_shape, dtype=x.dtype)
    flat_x = x.reshape((n_batch, *x.shape[batch:]))
    flat_i = indices.reshape((n_batch, *indices.shape[batch:]))
    flat_out = out.reshape((n_batch, *out_shape[batch:]))
    for b in range(n_batch):
        flat_out[b] = np.take(flat_x[b], flat_i[b], axis=axis - batch)
    return out


def _device_reading(op: Gather, rank: int, n_index: int, call):
    """What each device's gather reads, for both engines (the evaluator's `ShardedCall` and the
    SPMD exit's `SpmdCall`): the gathered axis, the result axis each axis of `x` runs along
    (None for the gathered one), and the mesh axes splitting the gathered axis (whose result
    must be Partial(sum) there). A batched gather of a split `x` fails closed, as typeinfer
    refuses it."""
    axis = op.axis % rank
    held = call.splits(0)
    if held and op.batch_dims:
        raise UnsupportedError(
            f"{call.where}: a batched gather of a split 'x' has no block reading"
        )
    axes = [j if j < axis else j + n_index - 1 for j in range(rank)]
    axes[axis] = None
    owners = held.get(axis, ())
    out = call.out_fields[0]
    attrs = out.layout.attrs if isinstance(out.layout, ShardLayout) else ()
    if owners and any(m >= len(attrs) or attrs[m] != Partial("sum") for m in owners):
        raise UnsupportedError(
            f"{call.where}: 'x' is Split on the gathered axis but the result is not "
            "Partial(sum) there, so the devices' row lookups have no reading as the result"
        )
    return axis, axes, owners


@register_sharded_eval(Gather)
def _sharded_eval(op: Gather, args, call):
    """Each device gathers from its own shard of `x`. The other axes are carried (the shard is
    already the result's block there); on a Split gathered axis a device looks up only the rows
    it owns and writes zeros for the others, so the devices hold the addends of the
    Partial(sum) typeinfer claims."""
    x, indices = args
    axis, axes, owners = _device_reading(op, len(x.shape), len(indices.shape), call)
    out = call.out_fields[0]

    def device(coord):
        x_local = call.aligned(x, coord, axes, own=frozenset({axis}))
        index = np.asarray(call.shard(indices, coord))
        check_index_range(op, index, axis, x.shape[axis])
        if not owners:
            return _eval(op, (x_local, index), out)
        owned = call.indices(0, axis, coord)  # sorted: a block, or a strided set
        mine = np.isin(index, owned)
        local = np.where(mine, np.searchsorted(owned, index), 0).astype(index.dtype)
        rows = _eval(op, (x_local, local), out)
        mask = mine.reshape((1,) * axis + mine.shape + (1,) * (rows.ndim - axis - mine.ndim))
        return np.where(mask, rows, np.zeros_like(rows))

    return call.wrap({coord: device(coord) for coord in call.coords})


@register_spmd_lowering(Gather)
def _spmd_lowering(op: Gather, operands, call):
    """The simulation's reading on devices. Each device gathers from its own shard of `x`; the
    other axes are carried. On a Split gathered axis (the vocab-parallel embedding) a device
    looks up only the rows it owns (`start <= index < start + rows`, its block's start from its
    mesh coordinate) and writes zeros elsewhere, so the devices hold the addends of the
    Partial(sum) typeinfer claims; no collective is emitted (the program's Reshard completes
    it). Out-of-range indices, an error in the reference, are clamped by `stablehlo.gather`."""
    x, indices = operands
    axis, axes, owners = _device_reading(op, len(x.type.shape), len(indices.type.shape), call)
    x_local = call.aligned(x, axes, own=frozenset({axis}))
    if not owners:
        return call.run_local((x_local, indices))
    table, index = call.value(x_local), call.value(indices)
    start = call.block_start(0, axis).convert(index.dtype).broadcast_in_dim([], index.shape)
    mine = (index >= start) & (index < start + table.shape[axis])
    rows = gather(table, mine.select(index - start, index.full(0)), axis)
    lookup_axes = list(range(axis, axis + index.rank))
    mask = mine.broadcast_in_dim(lookup_axes, rows.shape)
    return call.wrap(mask.select(rows, rows.full(0)))


register_surface("gather", Gather)
register_fusion_kind(Gather, FusionKind.BARRIER)


@register_vjp(Gather)
def _vjp(call, ct, ad):
    """Each gathered row's cotangent is added back where it was read (duplicate indices
    accumulate): a scatter_add into zeros, Gather's exact transpose; the indices have none."""
    op = call.target
    x, indices = call.args
    return (
        lambda: ad.tf.scatter_add(
            ad.zeros_like(x), indices, ct, axis=op.axis, batch_dims=op.batch_dims
        ),
        None,
    )


@register_validation_samples(Gather)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Gather(axis=0), (operand(8, 4), index_operand(4, bound=8)), "axis 0"),
        Sample(Gather(axis=1), (operand(4, 8), index_operand(4, 4, bound=8)), "axis 1", False),
    ]


@register_stablehlo(Gather)
def _stablehlo(op: Gather, operands, arg_types, out_type, lw):
    """One `stablehlo.gather` (batch_dims as batching dims). The reference refuses an
    out-of-range index; StableHLO clamps it into the axis, so such inputs are undefined here."""
    x, indices = (Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True))
    return gather(x, indices, op.axis % x.rank, op.batch_dims).name
