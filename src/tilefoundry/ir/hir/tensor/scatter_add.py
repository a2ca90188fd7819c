"""ScatterAdd: `index_add` with a static result shape, the exact transpose of Gather.

`out = x; out[c.., indices[b.., i..], t..] += updates[c.., i.., t..]`, with Gather's `axis` and
`batch_dims` (DESIGN §4.8): `updates` is shaped like `gather(x, indices, axis, batch_dims)`, and
duplicate indices accumulate. So `<gather(x), y> == <x, scatter_add(zeros, indices, y)>` for every
axis and batch_dims Gather accepts (Gather's VJP), and ScatterAdd's own VJP is `(dy, gather(dy))`.
Out-of-range (and negative) indices are an evaluation error, as in Gather; StableHLO's scatter
skips them, so such inputs are undefined at the exits.

The read and write positions are runtime data, so there is no affine relation; the sharding
rule (which Splits survive, when the result pends a sum) lives in `scatter_sharding`, which both
engines' rules below read.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    compute_in_f32,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.hir.tensor.gather import (
    check_index_range,
    check_indexing,
    index_mask_shape,
)
from tilefoundry.ir.hir.tensor.scatter_sharding import (
    ScatterPlacement,
    ScatterReading,
    scatter_placement,
    scatter_reading,
)
from tilefoundry.ir.lowering.values import Value, scatter_add
from tilefoundry.ir.types import TensorType, format_dim
from tilefoundry.ir.types.shard.int_tuple import same_value
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_index_range,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, index_operand, operand


class ScatterAdd(Op):
    """`x` plus `updates` added at `indices` along `axis` (Gather's transpose)."""

    x = ParamDef("input")
    indices = ParamDef("input")
    updates = ParamDef("input")
    axis = ParamDef("attribute", int)
    batch_dims = ParamDef("attribute", int, default=0)


def _check(op: ScatterAdd, x: TensorType, indices: TensorType, updates: TensorType) -> int:
    """The normalised axis, after Gather's index rules and the updates' shape rule."""
    axis = check_indexing(op, x, indices)
    if x.dtype.is_bool:
        raise VerifyError("ScatterAdd: operand 'x' is bool, which has no sum; cast it to an int")
    same_dtype(op, (("x", x), ("updates", updates)))
    batch = op.batch_dims
    want = (*x.shape[:axis], *indices.shape[batch:], *x.shape[axis + 1 :])
    if len(want) != updates.rank or not all(map(same_value, want, updates.shape)):
        shown = ", ".join(map(format_dim, want))
        raise VerifyError(
            f"ScatterAdd: operand 'updates' has shape [{', '.join(map(format_dim, updates.shape))}]"
            f" but gather(x, indices, axis={axis}, batch_dims={batch}) has shape [{shown}]; "
            "updates must have the shape of the gather this scatter transposes"
        )
    return axis


def _reading_of(op: ScatterAdd, x_rank: int, indices_rank: int) -> ScatterReading:
    return scatter_reading(op.axis, op.batch_dims, x_rank, indices_rank)


def _placement_of(op: ScatterAdd, x, indices, updates) -> ScatterPlacement:
    return scatter_placement(_reading_of(op, x.rank, indices.rank), x, indices, updates)


@register_typeinfer(ScatterAdd)
def _typeinfer(op: ScatterAdd, arg_types, ctx) -> TensorType:
    x, indices, updates = tensor_operands(op, arg_types)
    _check(op, x, indices, updates)
    layout = _placement_of(op, x, indices, updates).layout
    return TensorType(x.shape, x.dtype, layout, result_storage(op, (x, indices, updates)))


register_access_relation(ScatterAdd)(NO_AFFINE_RELATION)


def _add_at(op: ScatterAdd, x, indices, updates, out_dtype) -> np.ndarray:
    """numpy's unbuffered `add.at` per batch element (narrow floats accumulated in f32)."""
    axis, batch = op.axis % x.ndim, op.batch_dims
    n_batch = int(np.prod(x.shape[:batch], dtype=np.int64))
    lead = (slice(None),) * (axis - batch)

    def add_at(table, added):
        out = np.array(table, copy=True)
        flat_out = out.reshape((n_batch, *x.shape[batch:]))
        flat_i = indices.reshape((n_batch, *indices.shape[batch:]))
        flat_u = added.reshape((n_batch, *added.shape[batch:]))
        for b in range(n_batch):
            np.add.at(flat_out[b], (*lead, flat_i[b]), flat_u[b])
        return out

    return compute_in_f32(add_at, out_dtype, x, updates)


@register_index_range(ScatterAdd)
def _index_range(op: ScatterAdd, arg_types) -> dict[int, object]:
    x = arg_types[0]
    return {1: x.shape[op.axis % x.rank]}


@register_eval(ScatterAdd)
def _eval(op: ScatterAdd, args, out_type: TensorType) -> np.ndarray:
    x, indices, updates = (np.asarray(a) for a in args)
    check_index_range(op, indices, op.axis % x.ndim, x.shape[op.axis % x.ndim])
    return _add_at(op, x, indices, updates, out_type.dtype)


@register_sharded_eval(ScatterAdd)
def _sharded_eval(op: ScatterAdd, args, call):
    """Each device adds its share of the updates into its block of `x` (module docstring); on a
    split scattered axis it keeps only the updates whose index it owns."""
    x, indices, updates = args
    reading = _reading_of(op, len(x.shape), len(indices.shape))
    placement = _placement_of(op, *call.arg_types)
    owners = call.splits(0).get(reading.axis, ())
    out = call.out_fields[0]

    def device(coord):
        x_local = np.asarray(call.aligned(x, coord, reading.result_axes(0)))
        index = np.asarray(call.aligned(indices, coord, *_index_reading(reading, 1)))
        added = np.asarray(call.aligned(updates, coord, *_index_reading(reading, 2)))
        check_index_range(op, index, reading.axis, x.shape[reading.axis])
        if any(coord[m] for m in placement.x_first):
            x_local = np.zeros_like(x_local)
        if any(coord[m] for m in placement.updates_first):
            added = np.zeros_like(added)
        if owners:
            owned = call.indices(0, reading.axis, coord)
            mine = np.isin(index, owned)
            index = np.where(mine, np.searchsorted(owned, index), 0).astype(index.dtype)
            lined_up = index_mask_shape(mine.shape, reading.axis, reading.batch, reading.rank)
            added = np.where(mine.reshape(lined_up), added, added.dtype.type(0))
        return _add_at(op, x_local, index, added, out.dtype)

    return call.wrap({coord: device(coord) for coord in call.coords})


def _index_reading(reading: ScatterReading, operand: int) -> tuple:
    """`aligned`'s (axes, own, independent_of) for indices (1) or updates (2): index positions
    keep the device's own shard; the result axes the operand has no axis for read it whole."""
    axes = reading.result_axes(operand)
    return axes, reading.index_axes(operand), frozenset(range(reading.rank)) - set(axes)


@register_spmd_lowering(ScatterAdd)
def _spmd_lowering(op: ScatterAdd, operands, call):
    """The simulation's reading on devices: the same shares, replicated operands zeroed off the
    first device where the result pends a sum (`first_along`), and on a split scattered axis the
    updates outside this device's rows (`start <= index < start + rows`) masked to zero."""
    x, indices, updates = operands
    reading = _reading_of(op, len(x.type.shape), len(indices.type.shape))
    placement = _placement_of(op, *call.arg_types)
    table = call.value(call.aligned(x, reading.result_axes(0)))
    index = call.value(call.aligned(indices, *_index_reading(reading, 1)))
    added = call.value(call.aligned(updates, *_index_reading(reading, 2)))
    if placement.x_first:
        table = _kept_on(call.first_along(placement.x_first), table)
    if placement.updates_first:
        added = _kept_on(call.first_along(placement.updates_first), added)
    if call.splits(0).get(reading.axis):
        start = call.block_start(0, reading.axis).convert(index.dtype)
        start = start.broadcast_in_dim([], index.shape)
        mine = (index >= start) & (index < start + table.shape[reading.axis])
        index = mine.select(index - start, index.full(0))
        lines_up = [*range(reading.batch), *range(reading.axis, reading.axis + reading.n_index)]
        added = mine.broadcast_in_dim(lines_up, added.shape).select(added, added.full(0))
    return call.wrap(_scatter(op, table, index, added))


def _kept_on(first: Value, value: Value) -> Value:
    """`value` on the device where `first` holds, zeros elsewhere (counted once in a sum)."""
    return first.broadcast_in_dim([], value.shape).select(value, value.full(0))


def _scatter(op: ScatterAdd, x: Value, indices: Value, updates: Value) -> Value:
    """One add-scatter, narrow floats accumulated in f32 and rounded once (as the kernel)."""
    summed = scatter_add(x.widened(), indices, updates.widened(), op.axis % x.rank, op.batch_dims)
    return summed.convert(x.dtype)


register_surface("scatter_add", ScatterAdd)
register_fusion_kind(ScatterAdd, FusionKind.BARRIER)


@register_vjp(ScatterAdd)
def _vjp(call, ct, ad):
    """x's cotangent passes through; the updates' is the cotangent gathered where they were
    added (Gather is ScatterAdd's transpose); the indices have none. Gather accepts fewer
    operand states than ScatterAdd (no split indices, no split batched operand), so where it
    refuses the cotangent's and the indices' own, it gathers from replicated ones."""
    op = call.target
    _, indices, _ = call.args
    where = {"axis": op.axis, "batch_dims": op.batch_dims}

    def d_updates():
        try:
            return ad.tf.gather(ct, indices, **where)
        except VerifyError:
            return ad.tf.gather(ad.replicated(ct), ad.replicated(indices), **where)

    return (lambda: ct, None, d_updates)


@register_validation_samples(ScatterAdd)
def _validation_samples() -> list[Sample]:
    return [
        Sample(
            ScatterAdd(axis=0),
            (operand(8, 4), index_operand(8, bound=8), operand(8, 4)),
            "axis 0 (embedding gradient)",
        ),
        Sample(
            ScatterAdd(axis=1, batch_dims=1),
            (operand(4, 8), index_operand(4, 4, bound=8), operand(4, 4)),
            "axis 1, batched",
        ),
        Sample(
            ScatterAdd(axis=1),
            (operand(4, 8, 4), index_operand(8, bound=8), operand(4, 8, 4)),
            "axis 1, carried axes both sides",
            False,
        ),
    ]


@register_stablehlo(ScatterAdd)
def _stablehlo(op: ScatterAdd, operands, arg_types, out_type, lw):
    x, indices, updates = (Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True))
    return _scatter(op, x, indices, updates).name
