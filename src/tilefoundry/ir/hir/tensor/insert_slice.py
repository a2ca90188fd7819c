"""InsertSlice: write `update` into a window of `dst` (hir §1.3 InsertSlice).

The result is `dst`'s value with the window replaced, so it has `dst`'s type and lives in `dst`'s
storage (the op's own destination rule: lowering writes into dst's buffer).

Offsets may be runtime values, so the window is data: no affine access relation describes the
write (as for CacheUpdate), and a literal window is checked here while a runtime one is checked by
the kernel.

Sharding (beyond the seed's Partial rules, which are exact): a window whose position is runtime
data cannot be placed on a device's block at compile time, so a Split on an axis the window does
not cover whole is refused, and on the other axes dst and update must be split the same way (the
write is then elementwise there). These refusals are conservative, as DESIGN §4.6 allows.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.storage import anchor_storage
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Constant, Op, ParamDef, Tuple
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    completion_remedy,
    mesh_axis_label,
    op_name,
    refuse_partials,
    same_dtype,
    split_owners,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, TupleType, Type, format_dim, i64, is_static
from tilefoundry.ir.types.shard import Dynamic, ShardLayout, Split
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
from tilefoundry.rules.validation_samples import Sample, TupleOperand, constant_operand, operand
from tilefoundry.sharding.shard_reading import pending_partials

__all__ = ["InsertSlice", "check_write_sharding", "destination_storage"]


class InsertSlice(Op):
    dst = ParamDef("input")
    update = ParamDef("input")
    offsets = ParamDef("input")


def _require_tensor(op: Op, name: str, type_: Type) -> TensorType:
    if not isinstance(type_, TensorType):
        raise VerifyError(f"{op_name(op)}: operand '{name}' must be a tensor, got {type_}")
    return type_


def destination_storage(op: Op, dst: TensorType, source: TensorType):
    """The result lives where the destination lives; an unmaterialised destination takes the
    source's residency (semantic-analysis §3.3 anchoring, with the op's destination rule for a
    disagreement instead of an error)."""
    return anchor_storage(
        op_name(op), [dst.storage, source.storage], resolve_mixed=lambda _: dst.storage
    )


def _refuse_dynamic(op: Op, name: str, type_: TensorType) -> None:
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        return
    for mesh_axis, attr in enumerate(layout.attrs):
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' is Dynamic on "
                f"{mesh_axis_label(layout.mesh, mesh_axis)}; resolve it with reshard({name}, "
                "...) to Split or Broadcast first"
            )


def _check_partials(op: Op, dst_name: str, dst: TensorType, src_name: str, src: TensorType):
    """hir §1.3: a Partial dst needs the identical mesh and per-mesh-axis state on the source;
    a complete dst refuses a Partial source (the result cannot carry that state)."""
    dst_partials = pending_partials(dst)
    if not dst_partials:
        for mesh_axis, reduction in pending_partials(src).items():
            raise VerifyError(
                f"{op_name(op)}: operand '{src_name}' carries Partial({reduction}) on "
                f"{mesh_axis_label(src.layout.mesh, mesh_axis)} but '{dst_name}' is complete, "
                f"and the written result cannot keep that pending state; "
                f"{completion_remedy(src_name, src.layout, mesh_axis)}"
            )
        return
    dst_layout, src_layout = dst.layout, src.layout
    same_mesh = isinstance(src_layout, ShardLayout) and src_layout.mesh == dst_layout.mesh
    for mesh_axis, attr in enumerate(dst_layout.attrs):
        held = src_layout.attrs[mesh_axis] if same_mesh else None
        if type(held) is type(attr) and (held == attr or isinstance(attr, Split)):
            continue
        label = mesh_axis_label(dst_layout.mesh, mesh_axis)
        shown = repr(held) if held is not None else "not sharded on that mesh"
        raise VerifyError(
            f"{op_name(op)}: '{dst_name}' carries a Partial, so '{src_name}' must carry the "
            f"identical mesh and per-mesh-axis state; on {label} '{dst_name}' is {attr!r} but "
            f"'{src_name}' is {shown}; "
            f"insert reshard({src_name}, ...) to match '{dst_name}', or complete '{dst_name}' "
            "first"
        )


def _check_splits(
    op: Op, dst_name: str, dst: TensorType, src_name: str, src: TensorType, window_axes, blocked
) -> None:
    """See the module doc: no Split on a window axis, identical Splits elsewhere."""
    owners = {
        name: {
            m: (axis, factor, None if axis in blocked else factors)
            for m, (axis, factor, factors) in split_owners(op_name(op), t).items()
        }
        for name, t in ((dst_name, dst), (src_name, src))
    }
    for name, type_ in ((dst_name, dst), (src_name, src)):
        for mesh_axis, (axis, _, _) in owners[name].items():
            if axis in window_axes:
                label = mesh_axis_label(type_.layout.mesh, mesh_axis)
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' is Split on {label} along axis {axis}, "
                    "where the write window is runtime data and cannot be placed on one "
                    f"device's block; insert reshard({name}, ...) to Broadcast on {label}"
                )
    meshes = {
        name: t.layout.mesh if owners[name] else None
        for name, t in ((dst_name, dst), (src_name, src))
    }
    if owners[dst_name] != owners[src_name] or meshes[dst_name] != meshes[src_name]:
        raise VerifyError(
            f"{op_name(op)}: '{dst_name}' and '{src_name}' must be split the same way outside "
            f"the write window (the write is elementwise there), got '{dst_name}' "
            f"{dst.layout} and '{src_name}' {src.layout}; insert reshard({src_name}, ...) to "
            f"'{dst_name}''s sharding"
        )


def check_write_sharding(
    op: Op,
    dst_name: str,
    dst: TensorType,
    src_name: str,
    src: TensorType,
    window_axes,
    blocked_axes=frozenset(),
) -> None:
    """The sharding rules shared by the window-writing ops (InsertSlice, CacheUpdate). Along
    `blocked_axes` each device writes the window of its own blocks (BlockedDynamicUpdateSlice,
    which checks those Splits itself), so there the two are split alike but not equally long."""
    _refuse_dynamic(op, dst_name, dst)
    _refuse_dynamic(op, src_name, src)
    _check_partials(op, dst_name, dst, src_name, src)
    _check_splits(op, dst_name, dst, src_name, src, window_axes, blocked_axes)


def _offset_types(op: InsertSlice, offsets: Type, rank: int) -> tuple[TensorType, ...]:
    """hir §1.3: a bare rank-0 integer for a rank-1 dst, else a tuple of them, one per axis."""
    if isinstance(offsets, TensorType):
        if rank != 1:
            raise VerifyError(
                f"{op_name(op)}: a bare scalar offset is accepted for a rank-1 dst only; dst "
                f"has rank {rank}, so pass a tuple of {rank} offsets"
            )
        fields = (offsets,)
    elif isinstance(offsets, TupleType):
        fields = offsets.fields
        if len(fields) != rank:
            raise VerifyError(
                f"{op_name(op)}: {len(fields)} offsets for a rank-{rank} dst; give one per axis"
            )
    else:
        raise VerifyError(f"{op_name(op)}: offsets must be a scalar or a tuple, got {offsets}")
    for axis, field in enumerate(fields):
        if not isinstance(field, TensorType) or field.rank or not field.dtype.is_int:
            raise VerifyError(
                f"{op_name(op)}: the offset for axis {axis} must be a rank-0 integer scalar, "
                f"got {field}"
            )
    return fields


def _literal_offsets(ctx, rank: int) -> list[int | None]:
    """The compile-time offsets of the Call being typed (None where an offset is runtime)."""
    call = getattr(ctx, "call", None)
    node = call.args[2] if call is not None and len(call.args) == 3 else None
    elements = node.elements if isinstance(node, Tuple) else (node,) * (rank == 1)
    return [int(np.asarray(e.value)) if isinstance(e, Constant) else None for e in elements]


def _check_window(op: InsertSlice, dst: TensorType, update: TensorType, literals) -> None:
    for axis, (size, extent) in enumerate(zip(update.shape, dst.shape, strict=True)):
        if is_static(size) and is_static(extent) and size > extent:
            raise VerifyError(
                f"{op_name(op)}: update extent {size} exceeds dst extent {extent} on axis "
                f"{axis}; no window fits"
            )
        start = literals[axis] if axis < len(literals) else None
        if start is None:
            continue
        if start < 0 or (is_static(size) and is_static(extent) and start + size > extent):
            raise VerifyError(
                f"{op_name(op)}: the window [{start}, {start} + {format_dim(size)}) on axis "
                f"{axis} is outside dst's extent {format_dim(extent)}"
            )


@register_typeinfer(InsertSlice)
def _typeinfer(op: InsertSlice, arg_types, ctx) -> TensorType:
    dst = _require_tensor(op, "dst", arg_types[0])
    update = _require_tensor(op, "update", arg_types[1])
    same_dtype(op, [("dst", dst), ("update", update)])
    if update.rank != dst.rank:
        raise VerifyError(
            f"{op_name(op)}: update has rank {update.rank} but dst has rank {dst.rank}; they "
            "must match"
        )
    offsets = _offset_types(op, arg_types[2], dst.rank)
    refuse_partials(
        op,
        [(f"offsets[{i}]", t) for i, t in enumerate(offsets)],
        why="an offset selects a position and must be a complete value",
    )
    _check_window(op, dst, update, _literal_offsets(ctx, dst.rank))
    window_axes = {
        i for i, (u, d) in enumerate(zip(update.shape, dst.shape, strict=True)) if u != d
    }
    check_write_sharding(op, "dst", dst, "update", update, window_axes)
    return TensorType(dst.shape, dst.dtype, dst.layout, destination_storage(op, dst, update))


register_access_relation(InsertSlice)(NO_AFFINE_RELATION)


def _runtime_offsets(offsets, rank: int) -> list[int]:
    values = offsets if isinstance(offsets, tuple | list) else (offsets,)
    if len(values) != rank:
        raise EvalError(f"InsertSlice: {len(values)} offsets for a rank-{rank} dst")
    return [int(np.asarray(v)) for v in values]


@register_eval(InsertSlice)
def _eval(op: InsertSlice, args, out_type) -> np.ndarray:
    dst, update, offsets = (np.asarray(args[0]), np.asarray(args[1]), args[2])
    if update.ndim != dst.ndim or update.dtype != dst.dtype:
        raise EvalError(
            f"InsertSlice: update {update.dtype}{list(update.shape)} does not match dst "
            f"{dst.dtype}{list(dst.shape)} in rank and dtype"
        )
    starts = _runtime_offsets(offsets, dst.ndim)
    for axis, (start, size, extent) in enumerate(zip(starts, update.shape, dst.shape, strict=True)):
        if start < 0 or start + size > extent:
            raise EvalError(
                f"InsertSlice: the window [{start}, {start + size}) on axis {axis} is outside "
                f"dst's extent {extent}"
            )
    result = np.array(dst, copy=True)
    window = tuple(slice(s, s + n) for s, n in zip(starts, update.shape, strict=True))
    result[window] = update
    return result


@register_sharded_eval(InsertSlice)
def _sharded_eval(op: InsertSlice, args, call):
    """Each device writes its block of `update` into its block of `dst`. typeinfer admits a Split
    only on an axis the window covers whole (offset 0 there, so the device's window is its whole
    block) and splits `update` exactly as `dst`; `aligned` fails closed on anything else. An
    addend written into an addend is an addend of the written value, for sum, max and min."""
    dst, update, offsets = args
    window = {a for a, (u, d) in enumerate(zip(update.shape, dst.shape, strict=True)) if u != d}
    rank = len(dst.shape)
    dst_axes = tuple(range(rank))
    update_axes = tuple(None if a in window else a for a in range(rank))
    return call.wrap(
        {
            coord: _eval(
                op,
                (
                    call.aligned(dst, coord, dst_axes),
                    call.aligned(update, coord, update_axes),
                    call.shard(offsets, coord),
                ),
                None,
            )
            for coord in call.coords
        }
    )


@register_spmd_lowering(InsertSlice)
def _spmd_lowering(op: InsertSlice, operands, call):
    """The simulation's reading on devices: each device writes its share of `update` into its
    block of `dst` at the same offsets (an offset on a split axis is 0, the window covering
    that axis whole, so it means the same on every block)."""
    dst, update, offsets = operands
    rank = len(dst.local.shape)
    window = {
        a
        for a, (u, d) in enumerate(
            zip(call.lw.shape(update.type), call.lw.shape(dst.type), strict=True)
        )
        if u != d
    }
    update_axes = tuple(None if a in window else a for a in range(rank))
    return call.run_local(
        (call.aligned(dst, tuple(range(rank))), call.aligned(update, update_axes), offsets)
    )


register_surface("insert_slice", InsertSlice)
register_fusion_kind(InsertSlice, FusionKind.BARRIER)


@register_vjp(InsertSlice)
def _vjp(call, ct, ad):
    """dst keeps its cotangent outside the window (the window written with zeros); update
    receives the window, read one window axis at a time by DynamicSlice at the same runtime
    offset (an offset the kernel accepts keeps the window inside dst, so DynamicSlice's clamp
    never moves it); the offsets are positions, with no cotangent."""
    tf = ad.tf
    dst, update, offsets = call.args

    def offset(axis: int):
        if isinstance(offsets, Tuple):
            return offsets.elements[axis]
        if isinstance(offsets.type, TupleType):
            return tf.tuple_get_item(offsets, index=axis)
        return offsets

    def d_update():
        window = ct
        for axis, (size, extent) in enumerate(zip(update.type.shape, dst.type.shape, strict=True)):
            if size != extent:
                window = tf.dynamic_slice(window, offset(axis), axis=axis, size=size)
        return window

    return (lambda: tf.insert_slice(ct, ad.zeros_like(update), offsets), d_update, None)


@register_validation_samples(InsertSlice)
def _validation_samples() -> list[Sample]:
    offsets = TupleOperand((constant_operand(4), constant_operand(0)))
    return [Sample(InsertSlice(), (operand(8, 8), operand(4, 8), offsets))]


@register_stablehlo(InsertSlice)
def _stablehlo(op: InsertSlice, operands, arg_types, out_type, lw):
    """`stablehlo.dynamic_update_slice` at the (runtime) offsets, converted to one index dtype.

    Bounds: typeinfer refuses a literal window outside dst, and the reference kernel refuses a
    runtime one; StableHLO instead clamps each start into [0, dst extent - update extent] and
    writes there. On every input the reference accepts the two agree; an out-of-range runtime
    offset (an error in the reference) silently writes a clamped window here. There is no
    StableHLO error channel to reproduce the refusal without a custom_call, and refusing every
    runtime offset would refuse the op's purpose, so this exit documents the clamp instead."""
    dst, update = (Value.of(lw, n, t) for n, t in zip(operands[:2], arg_types[:2], strict=True))
    names = operands[2] if isinstance(operands[2], tuple) else (operands[2],)
    types = arg_types[2].fields if isinstance(arg_types[2], TupleType) else (arg_types[2],)
    offsets = [Value.of(lw, n, t).convert(i64) for n, t in zip(names, types, strict=True)]
    return dst.dynamic_update_slice(update, offsets).name


@register_pallas(InsertSlice, reads_refs=True)
def _pallas(op: InsertSlice, args, arg_types, out_type, kx):
    """dst with the window replaced, as a selection (`kx.write_window`: a gather-load of
    update's Ref when it is a gmem parameter). On every window the reference accepts this is its
    result; one it refuses (outside dst) is undefined here, as at the StableHLO exit."""
    dst, update, offsets = args
    offsets = offsets if isinstance(offsets, tuple) else (offsets,)
    return kx.write_window(dst, update, [kx.scalar_start(o, 1, 0) for o in offsets])


@register_pallas_sharded(InsertSlice)
def _pallas_sharded(op: InsertSlice, args, call):
    """The simulation's reading in each CTA: its block of update written into its block of dst
    (typeinfer admits a Split only where the window covers the axis whole)."""
    dst, update = call.global_shape(0), call.global_shape(1)
    window = {a for a, (u, d) in enumerate(zip(update, dst, strict=True)) if u != d}
    rank = len(dst)
    update_axes = [None if a in window else a for a in range(rank)]
    operands = (call.aligned(0, range(rank)), call.aligned(1, update_axes), args[2])
    return call.local_result(operands)
