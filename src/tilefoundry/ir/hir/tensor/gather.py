"""Gather (hir tensor Gather; DESIGN §4.8): `out[c.., i.., t..] = x[c.., indices[b.., i..], t..]`.

The read position on the gathered axis is runtime data, so no affine map describes the access:
Gather registers `NO_AFFINE_RELATION` (traffic analysis charges whole tensors) and its sharding
rule is written here by hand, as the seed states it:

- Broadcast and Partial carry (a row selection is linear: gather(Σ xᵢ) == Σ gather(xᵢ), and it
  commutes with max/min just as well, each output element being one input element);
- a Split on the gathered axis becomes Partial(sum) on that mesh axis (each device holds the true
  rows it owns and contributes zero rows elsewhere), and only when it is the only Split;
- a Split on another axis carries, renumbered around the index dims (for a batched gather,
  `indices` replicated there is cut to each device's batch rows);
- the output Layout is always natural C-order over the output shape, never inherited.

A batched gather (`batch_dims > 0`, the Megatron vocab-parallel cross-entropy's target logit,
an MoE combine) takes the same rules, the batch axes being carried axes (issue 29; the seed
refuses it, DESIGN §4.8). `indices` must be an integer tensor, replicated (the seed shards only
`x`) except on a batch axis, which it may split exactly as `x` splits it: each device then
gathers its own batch rows at its own indices. Valid indices lie in [0, extent): out-of-range,
including negative, indices are an evaluation error rather than numpy's wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    mesh_axis_label,
    normalize_axis,
    op_name,
    result_storage,
    split_owners,
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
    register_index_range,
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
    if not _real_sharding(indices.layout):
        return axis
    layout = indices.layout
    x_splits = _splits_by_axis(split_owners("Gather: operand 'x'", x))
    index_owners = split_owners("Gather: operand 'indices'", indices)
    index_splits = _splits_by_axis(index_owners)
    for mesh_axis, attr in enumerate(layout.attrs):
        if isinstance(attr, Broadcast):
            continue
        label = mesh_axis_label(layout.mesh, mesh_axis)
        axis_of = index_owners.get(mesh_axis, (None,))[0]
        alike = (
            axis_of is not None
            and axis_of < op.batch_dims
            and isinstance(x.layout, ShardLayout)
            and x.layout.mesh == layout.mesh
            and x_splits.get(axis_of) == index_splits[axis_of]
        )
        if not alike:
            raise VerifyError(
                f"Gather: operand 'indices' carries the sharding {layout.attrs}, {attr} on "
                f"{label}; indices may be split only along a batch axis that 'x' splits the "
                "same way (the seed defines no other rule for sharded indices), so it fails "
                f"closed; insert reshard(indices, ...) to Broadcast on {label} first"
            )
    return axis


def _splits_by_axis(owners: dict) -> dict[int, frozenset]:
    """Logical axis -> its (mesh axis, factor index) pairs: how it is split, whole."""
    found: dict[int, set] = {}
    for mesh_axis, (axis, factor, _) in owners.items():
        found.setdefault(axis, set()).add((mesh_axis, factor))
    return {axis: frozenset(pairs) for axis, pairs in found.items()}


def index_mask_shape(indices_shape: tuple, axis: int, batch: int, rank: int) -> tuple:
    """The shape that lines an indices-shaped mask up with the axes of the gather's result (or
    a scatter's updates): batch axes first, then x's axes before `axis`, then the index axes,
    then x's axes after it (`rank` is x's rank)."""
    return (
        *indices_shape[:batch],
        *(1,) * (axis - batch),
        *indices_shape[batch:],
        *(1,) * (rank - axis - 1),
    )


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


@register_index_range(Gather)
def _index_range(op: Gather, arg_types) -> dict[int, object]:
    x = arg_types[0]
    return {1: x.shape[op.axis % x.rank]}


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


@dataclass(frozen=True)
class _DeviceReading:
    """What each device's gather reads, for every engine (the evaluator's `ShardedCall`, the
    SPMD exit's `SpmdCall`, the Pallas exit's `PallasCall`): the result axis each axis of `x`
    runs along (None for the gathered one) and each axis of `indices` runs along, the result
    axes `indices` is read whole along (x's other axes), and the mesh axes splitting the
    gathered axis (whose result must be Partial(sum) there)."""

    axis: int
    batch: int
    rank: int
    x_axes: list
    index_axes: list
    independent_of: frozenset
    owners: tuple

    def mask_shape(self, indices_shape: tuple) -> tuple:
        return index_mask_shape(indices_shape, self.axis, self.batch, self.rank)


def _device_reading(op: Gather, rank: int, indices_rank: int, call) -> _DeviceReading:
    axis, batch = op.axis % rank, op.batch_dims
    n_index = indices_rank - batch
    x_axes = [j if j < axis else j + n_index - 1 for j in range(rank)]
    x_axes[axis] = None
    index_axes = [*range(batch), *range(axis, axis + n_index)]
    owners = call.splits(0).get(axis, ())
    out = call.out_fields[0]
    attrs = out.layout.attrs if isinstance(out.layout, ShardLayout) else ()
    if owners and any(m >= len(attrs) or attrs[m] != Partial("sum") for m in owners):
        raise UnsupportedError(
            f"{call.where}: 'x' is Split on the gathered axis but the result is not "
            "Partial(sum) there, so the devices' row lookups have no reading as the result"
        )
    carried = frozenset(a for j, a in enumerate(x_axes) if a is not None and j >= batch)
    return _DeviceReading(axis, batch, rank, x_axes, index_axes, carried, owners)


@register_sharded_eval(Gather)
def _sharded_eval(op: Gather, args, call):
    """Each device gathers from its own shard of `x`. The other axes are carried (the shard is
    already the result's block there); on a Split gathered axis a device looks up only the rows
    it owns and writes zeros for the others, so the devices hold the addends of the
    Partial(sum) typeinfer claims."""
    x, indices = args
    reading = _device_reading(op, len(x.shape), len(indices.shape), call)
    axis, out = reading.axis, call.out_fields[0]

    def device(coord):
        x_local = call.aligned(x, coord, reading.x_axes, own=frozenset({axis}))
        index = np.asarray(
            call.aligned(indices, coord, reading.index_axes, independent_of=reading.independent_of)
        )
        check_index_range(op, index, axis, x.shape[axis])
        if not reading.owners:
            return _eval(op, (x_local, index), out)
        owned = call.indices(0, axis, coord)  # sorted: a block, or a strided set
        mine = np.isin(index, owned)
        local = np.where(mine, np.searchsorted(owned, index), 0).astype(index.dtype)
        rows = _eval(op, (x_local, local), out)
        return np.where(mine.reshape(reading.mask_shape(mine.shape)), rows, np.zeros_like(rows))

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
    reading = _device_reading(op, len(x.type.shape), len(indices.type.shape), call)
    axis = reading.axis
    x_local = call.aligned(x, reading.x_axes, own=frozenset({axis}))
    indices = call.aligned(indices, reading.index_axes, independent_of=reading.independent_of)
    if not reading.owners:
        return call.run_local((x_local, indices))
    table, index = call.value(x_local), call.value(indices)
    start = call.block_start(0, axis).convert(index.dtype).broadcast_in_dim([], index.shape)
    mine = (index >= start) & (index < start + table.shape[axis])
    rows = gather(table, mine.select(index - start, index.full(0)), axis, op.batch_dims)
    mask = mine.broadcast_in_dim(reading.index_axes, rows.shape)
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
        Sample(
            Gather(axis=1, batch_dims=1),
            (operand(4, 8), index_operand(4, 4, bound=8)),
            "axis 1, batched (the target logit)",
        ),
        Sample(
            Gather(axis=1, batch_dims=1),
            (operand(4, 8, 4), index_operand(4, 2, bound=8)),
            "axis 1, batched, a carried axis after it",
            False,
        ),
    ]


@register_stablehlo(Gather)
def _stablehlo(op: Gather, operands, arg_types, out_type, lw):
    """One `stablehlo.gather` (batch_dims as batching dims). The reference refuses an
    out-of-range index; StableHLO clamps it into the axis, so such inputs are undefined here."""
    x, indices = (Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True))
    return gather(x, indices, op.axis % x.rank, op.batch_dims).name


@register_pallas(Gather, reads_refs=True)
def _pallas(op: Gather, args, arg_types, out_type, kx):
    """One gather-load from x's Ref when x is a gmem parameter (the form of gather Triton
    lowers), jnp's gather of a value otherwise. Indices are clamped into the axis, as
    `stablehlo.gather` clamps them: the reference refuses an out-of-range index, a kernel
    cannot."""
    x, indices = args
    return kx.take(x, indices, op.axis % arg_types[0].rank, op.batch_dims)


@register_pallas_sharded(Gather)
def _pallas_sharded(op: Gather, args, call):
    """Each CTA gathers from its own block of x with its block of the indices, the other axes
    carried, as in the simulation (a Split gathered axis leaves a Partial(sum), which the Pallas
    exit refuses first)."""
    x, indices = call.arg_types
    reading = _device_reading(op, x.rank, indices.rank, call)
    return call.local_result((call.aligned(0, reading.x_axes), call.aligned(1, reading.index_axes)))
