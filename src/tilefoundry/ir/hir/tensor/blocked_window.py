"""Per-device loop windows: the same window read (or written) in each block of an axis.

Expert parallelism as users write it (issue 29): the experts `w` of shape `(E, ..)` are split
over `ep`, and the loop `for e in range(E_LOCAL)` runs over exactly one device's share of them,
so that each device walks its own experts: `w[e]` on device `d` is expert `d * E_LOCAL + e`.
DESIGN §4.14 makes a runtime window of a split axis fail closed (semantic-analysis §3.2: a
translated access has no owner-boundary proof); this is the one window whose owner boundary is
proven by construction, because it never crosses one.

Its global meaning, which the types state: the axis is read as `blocks` equal blocks of
`L = extent / blocks` elements, and the window `[p, p + size)` is taken at the same place in each
block, `p = scale * start + offset` clamped into `[0, L - size]` (DynamicSlice's one clamping
behaviour). The result keeps the axis, `blocks * size` long: for `w[e]` (size 1) one expert per
block, `w[e::E_LOCAL]`. When the mesh axes splitting that axis are its outermost factors and hold
a device count dividing `blocks`, each device's shard is whole blocks, so the window is a local
read of its own shard and the result is split the same way (its windows); no data moves. Any other
Split of the windowed axis fails closed; the other axes follow the elementwise rules, and
Partials carry (a selection commutes with every pending reduction).

`BlockedDynamicUpdateSlice` is the write twin (DynamicUpdateSlice's): `update`, `blocks * size`
long on the axis, replaces the window of each block; `x` and `update` must be split alike, and
the write rules of InsertSlice hold for Partials.

The frontend picks these ops for `w[e]` / `out[e] = y` exactly when the loop covers a device's
local extent (frontend.windows); the reference kernels read the global form, and both engines run
the op on each device's shard with `blocks` divided by the devices splitting the axis.
"""

from __future__ import annotations

from math import prod

import islpy as isl
import numpy as np

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    AffineAccess,
    BoundaryRelation,
    identity_access,
)
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    mesh_axis_label,
    normalize_axis,
    op_name,
    propagate,
    result_storage,
    same_dtype,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.hir.tensor.dynamic_slice import (
    check_start,
    clamped_start,
    start_index,
    static_int,
)
from tilefoundry.ir.hir.tensor.dynamic_update_slice import check_tile_shape
from tilefoundry.ir.hir.tensor.insert_slice import check_write_sharding, destination_storage
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, format_dim, is_static
from tilefoundry.rules import (
    EVAL,
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, constant_operand, operand

__all__ = ["BlockedDynamicSlice", "BlockedDynamicUpdateSlice"]


def _positive(value: object) -> int:
    count = static_int(value)
    if count < 1:
        raise VerifyError(f"must be a positive compile-time int, got {count}")
    return count


class BlockedDynamicSlice(Op):
    """`size` elements at `scale * start + offset` in each of the `blocks` blocks of `axis`."""

    x = ParamDef("input")
    start = ParamDef("input")
    axis = ParamDef("attribute", int)
    blocks = ParamDef("attribute", int, validate=_positive)
    size = ParamDef("attribute", int, validate=_positive)
    scale = ParamDef("attribute", int, default=1, validate=static_int)
    offset = ParamDef("attribute", int, default=0, validate=static_int)


class BlockedDynamicUpdateSlice(Op):
    """`x` with the window at `scale * start + offset` of each block replaced by `update`."""

    x = ParamDef("input")
    update = ParamDef("input")
    start = ParamDef("input")
    axis = ParamDef("attribute", int)
    blocks = ParamDef("attribute", int, validate=_positive)
    scale = ParamDef("attribute", int, default=1, validate=static_int)
    offset = ParamDef("attribute", int, default=0, validate=static_int)


def _block_length(op: Op, x: TensorType, axis: int, size: int) -> int:
    """L, the extent of one block; the window must fit in it."""
    extent = x.shape[axis]
    if not is_static(extent) or extent % op.blocks:
        raise VerifyError(
            f"{op_name(op)}: axis {axis} of extent {format_dim(extent)} does not hold "
            f"{op.blocks} equal blocks; the axis must be a static multiple of blocks"
        )
    length = extent // op.blocks
    if size > length:
        raise VerifyError(
            f"{op_name(op)}: the window of {size} elements is wider than one block of axis "
            f"{axis} ({op.blocks} blocks of {length}); use a window of at most {length}"
        )
    return length


def check_blocked_splits(op: Op, operands, axis: int) -> None:
    """A Split along the windowed axis must make each device's shard whole blocks: the axis's
    outermost factors, over mesh axes whose device count divides `blocks`."""
    for name, type_ in operands:
        on_axis = {
            m: factor
            for m, (logical, factor, _) in split_owners(f"{op_name(op)}: '{name}'", type_).items()
            if logical == axis
        }
        if not on_axis:
            continue
        mesh = type_.layout.mesh
        devices = prod(mesh.axes[m].size for m in on_axis)
        outermost = sorted(on_axis.values()) == list(range(len(on_axis)))
        if op.blocks % devices or not outermost:
            labels = ", ".join(mesh_axis_label(mesh, m) for m in sorted(on_axis))
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' is split along the windowed axis {axis} over "
                f"{labels} ({devices} devices{'' if outermost else ', on inner factors'}), but "
                f"the window is taken in each of {op.blocks} blocks; it is each device's own "
                "only when every device holds whole blocks (the axis's outermost factors, "
                f"over a device count dividing {op.blocks}); insert reshard({name}, ...) to "
                f"Broadcast on {labels}, or loop over exactly one device's share of the axis"
            )


def _shard_view(rank: int, operands: int) -> AccessRelations:
    """The shard engine's view: every axis a projection, the windowed one too (its Split is
    checked by `check_blocked_splits` to be one block per device, carried to the result)."""
    dims = ", ".join(f"d{i}" for i in range(rank))
    scalar = AffineAccess(isl.Map(f"{{ [{dims}] -> [] }}"))
    reads = [BoundaryRelation(identity_access(rank))] * (operands - 1)
    return AccessRelations(
        (*reads, BoundaryRelation(scalar)), (BoundaryRelation(identity_access(rank)),)
    )


@register_typeinfer(BlockedDynamicSlice)
def _typeinfer_read(op: BlockedDynamicSlice, arg_types, ctx) -> TensorType:
    x, start = tensor_operands(op, arg_types)
    check_start(op, start)
    axis = normalize_axis(op, op.axis, x.rank)
    _block_length(op, x, axis, op.size)
    check_blocked_splits(op, [("x", x)], axis)
    shape = tuple(op.blocks * op.size if i == axis else e for i, e in enumerate(x.shape))
    layout = propagate(op, arg_types, shape, relations=_shard_view(x.rank, 2))
    return TensorType(shape, x.dtype, layout, result_storage(op, (x,)))


def _update_size(op: BlockedDynamicUpdateSlice, x: TensorType, update: TensorType, axis: int):
    check_tile_shape(op, x, update, axis)
    written = update.shape[axis]
    if not is_static(written) or written % op.blocks:
        raise VerifyError(
            f"{op_name(op)}: 'update' extent {format_dim(written)} on axis {axis} is not "
            f"{op.blocks} equal windows (one per block); write blocks * size elements"
        )
    return written // op.blocks


@register_typeinfer(BlockedDynamicUpdateSlice)
def _typeinfer_write(op: BlockedDynamicUpdateSlice, arg_types, ctx) -> TensorType:
    x, update, start = tensor_operands(op, arg_types)
    same_dtype(op, [("x", x), ("update", update)])
    check_start(op, start)
    axis = normalize_axis(op, op.axis, x.rank)
    _block_length(op, x, axis, _update_size(op, x, update, axis))
    check_blocked_splits(op, [("x", x), ("update", update)], axis)
    check_write_sharding(op, "x", x, "update", update, set(), blocked_axes={axis})
    return TensorType(x.shape, x.dtype, x.layout, destination_storage(op, x, update))


register_access_relation(BlockedDynamicSlice)(NO_AFFINE_RELATION)
register_access_relation(BlockedDynamicUpdateSlice)(NO_AFFINE_RELATION)


def _as_blocks(array: np.ndarray, axis: int, blocks: int) -> np.ndarray:
    """`array` with `axis` viewed as (blocks, L)."""
    shape = array.shape
    return array.reshape((*shape[:axis], blocks, shape[axis] // blocks, *shape[axis + 1 :]))


def _window(axis: int, begin: int, size: int) -> tuple:
    return (slice(None),) * (axis + 1) + (slice(begin, begin + size),)


@register_eval(BlockedDynamicSlice)
def _eval_read(op: BlockedDynamicSlice, args, out_type) -> np.ndarray:
    x = np.asarray(args[0])
    axis = op.axis % x.ndim
    begin = clamped_start(op, args[1], x.shape[axis] // op.blocks, op.size)
    picked = _as_blocks(x, axis, op.blocks)[_window(axis, begin, op.size)]
    shape = list(x.shape)
    shape[axis] = op.blocks * op.size
    return picked.reshape(shape)


@register_eval(BlockedDynamicUpdateSlice)
def _eval_write(op: BlockedDynamicUpdateSlice, args, out_type) -> np.ndarray:
    x, update = np.asarray(args[0]), np.asarray(args[1])
    axis = op.axis % x.ndim
    size = update.shape[axis] // op.blocks
    begin = clamped_start(op, args[2], x.shape[axis] // op.blocks, size)
    result = np.array(x, copy=True)
    _as_blocks(result, axis, op.blocks)[_window(axis, begin, size)] = _as_blocks(
        update, axis, op.blocks
    )
    return result


def _on_each_shard(op: Op, call) -> Op:
    """The op each device runs on its own shard: its blocks are the blocks it holds."""
    axis = op.axis % len(call.out_shapes[0])
    devices = prod(int(call.mesh.shape[m]) for m in call.splits(0).get(axis, ()))
    return type(op)(**{**op.attributes(), "blocks": op.blocks // devices})


@register_sharded_eval(BlockedDynamicSlice)
@register_sharded_eval(BlockedDynamicUpdateSlice)
def _sharded_eval(op, args, call):
    """Each device runs the window on its own shard (module docstring): along the windowed
    axis the shard is whole blocks, along the others the window takes the block it holds."""
    local, kernel = _on_each_shard(op, call), EVAL.lookup(type(op))
    return call.map_devices(lambda coord, shards: kernel(local, shards, call.out_fields[0]))


@register_spmd_lowering(BlockedDynamicSlice)
@register_spmd_lowering(BlockedDynamicUpdateSlice)
def _spmd_lowering(op, operands, call):
    """The simulation's reading on devices: the op's own rule on each device's shards."""
    return call.run_local(operands, _on_each_shard(op, call))


def _window_attributes(op: Op) -> dict:
    return {"axis": op.axis, "blocks": op.blocks, "scale": op.scale, "offset": op.offset}


@register_vjp(BlockedDynamicSlice)
def _vjp_read(call, ct, ad):
    """The windows' cotangent written into zeros of x's type at the same (clamped) place of
    each block: DynamicSlice's transpose, block by block."""
    x, start = call.args
    window = _window_attributes(call.target)
    return (
        lambda: ad.tf.blocked_dynamic_update_slice(ad.zeros_like(x), ct, start, **window),
        None,
    )


@register_vjp(BlockedDynamicUpdateSlice)
def _vjp_write(call, ct, ad):
    """x keeps its cotangent outside the windows, the update receives the windows."""
    op = call.target
    _, update, start = call.args
    window = _window_attributes(op)
    size = update.type.shape[op.axis % update.type.rank] // op.blocks
    return (
        lambda: ad.tf.blocked_dynamic_update_slice(ct, ad.zeros_like(update), start, **window),
        lambda: ad.tf.blocked_dynamic_slice(ct, start, size=size, **window),
        None,
    )


register_surface("blocked_dynamic_slice", BlockedDynamicSlice)
register_surface("blocked_dynamic_update_slice", BlockedDynamicUpdateSlice)
register_fusion_kind(BlockedDynamicSlice, FusionKind.BARRIER)
register_fusion_kind(BlockedDynamicUpdateSlice, FusionKind.BARRIER)


@register_validation_samples(BlockedDynamicSlice)
def _read_samples() -> list[Sample]:
    return [
        Sample(
            BlockedDynamicSlice(axis=0, blocks=4, size=1),
            (operand(8, 4), constant_operand(1)),
            "row 1 of each of 4 blocks (an expert per device)",
        ),
        Sample(
            BlockedDynamicSlice(axis=1, blocks=2, size=2, scale=2),
            (operand(4, 8), constant_operand(1)),
            "cols 2:4 of each of 2 blocks",
        ),
    ]


@register_validation_samples(BlockedDynamicUpdateSlice)
def _write_samples() -> list[Sample]:
    return [
        Sample(
            BlockedDynamicUpdateSlice(axis=0, blocks=4),
            (operand(8, 4), operand(4, 4), constant_operand(1)),
            "row 1 of each of 4 blocks",
        ),
        Sample(
            BlockedDynamicUpdateSlice(axis=1, blocks=2),
            (operand(4, 8), operand(4, 4), constant_operand(1)),
            "cols 1:3 of each of 2 blocks",
            False,
        ),
    ]


def _value_blocks(value: Value, axis: int, blocks: int) -> Value:
    shape = value.shape
    return value.reshape((*shape[:axis], blocks, shape[axis] // blocks, *shape[axis + 1 :]))


def _starts(lw, op: Op, start: str, start_type: TensorType, rank: int, axis: int) -> list:
    position = start_index(lw, op, start, start_type)
    zero = position.full(0)
    return [position if i == axis + 1 else zero for i in range(rank + 1)]


@register_stablehlo(BlockedDynamicSlice)
def _stablehlo_read(op: BlockedDynamicSlice, operands, arg_types, out_type, lw):
    """The axis reshaped to (blocks, L), one `dynamic_slice` of the L axis (StableHLO clamps
    the start into [0, L - size], as the kernel does), reshaped back."""
    x = Value.of(lw, operands[0], arg_types[0])
    axis = op.axis % x.rank
    view = _value_blocks(x, axis, op.blocks)
    sizes = [op.size if i == axis + 1 else e for i, e in enumerate(view.shape)]
    picked = view.dynamic_slice(_starts(lw, op, operands[1], arg_types[1], x.rank, axis), sizes)
    return picked.reshape(out_type.shape).name


@register_stablehlo(BlockedDynamicUpdateSlice)
def _stablehlo_write(op: BlockedDynamicUpdateSlice, operands, arg_types, out_type, lw):
    x = Value.of(lw, operands[0], arg_types[0])
    update = Value.of(lw, operands[1], arg_types[1])
    axis = op.axis % x.rank
    starts = _starts(lw, op, operands[2], arg_types[2], x.rank, axis)
    view = _value_blocks(x, axis, op.blocks)
    written = view.dynamic_update_slice(_value_blocks(update, axis, op.blocks), starts)
    return written.reshape(x.shape).name


def _kernel_blocks(kx, value, axis: int, blocks: int):
    shape = value.shape
    return kx.jnp.reshape(value, (*shape[:axis], blocks, shape[axis] // blocks, *shape[axis + 1 :]))


@register_pallas(BlockedDynamicSlice, reads_refs=True)
def _pallas_read(op: BlockedDynamicSlice, args, arg_types, out_type, kx):
    """The window of every block (`kx.window`): of a gmem parameter, one gather-load of only
    the windows from its Ref."""
    x, start = args
    position = kx.scalar_start(start, op.scale, op.offset)
    return kx.window(x, op.axis % arg_types[0].rank, position, op.size, op.blocks)


@register_pallas(BlockedDynamicUpdateSlice)
def _pallas_write(op: BlockedDynamicUpdateSlice, args, arg_types, out_type, kx):
    x, update, start = args
    axis = op.axis % x.ndim
    view = _kernel_blocks(kx, x, axis, op.blocks)
    tiles = _kernel_blocks(kx, update.astype(x.dtype), axis, op.blocks)
    size = tiles.shape[axis + 1]
    position = kx.scalar_start(start, op.scale, op.offset)
    position = kx.lax.clamp(0, position, view.shape[axis + 1] - size)
    starts = [position if a == axis + 1 else None for a in range(view.ndim)]
    return kx.jnp.reshape(kx.write_window(view, tiles, starts), x.shape)
