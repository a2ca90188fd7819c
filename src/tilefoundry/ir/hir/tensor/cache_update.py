"""CacheUpdate: write `new[:, :s]` into `cache[:, cur_pos:cur_pos + s]` (hir §1.3 CacheUpdate).

The write interval is runtime data, never a shape: the result has the cache's exact type (no
context-length DimVar grows), the interval is checked by the kernel, and no affine access relation
is registered (the seed: the boundaries are opaque, so traffic analysis charges whole tensors).

Sharding follows InsertSlice's rules with the length axis (1) as the window: the seed's Partial
rules exactly, no Split on the length axis, identical Splits on batch / heads / head_dim.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    op_name,
    refuse_partials,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.hir.tensor.insert_slice import check_write_sharding, destination_storage
from tilefoundry.ir.lowering.values import Value, concatenate, iota
from tilefoundry.ir.types import TensorType, format_dim, i32, is_static
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
from tilefoundry.rules.validation_samples import Sample, constant_operand, operand

__all__ = ["CacheUpdate"]

_LENGTH_AXIS = 1
_AXIS_NAMES = ("B", "len", "kv_heads", "head_dim")


class CacheUpdate(Op):
    cache = ParamDef("input")
    cur_pos = ParamDef("input")
    s = ParamDef("input")
    new = ParamDef("input")


def _shape_text(type_: TensorType) -> str:
    return "[" + ", ".join(format_dim(e) for e in type_.shape) + "]"


def _check_rank4(op: CacheUpdate, name: str, type_: TensorType) -> None:
    if type_.rank != 4:
        raise VerifyError(
            f"{op_name(op)}: '{name}' must be rank 4 [B, len, kv_heads, head_dim], got rank "
            f"{type_.rank} {_shape_text(type_)}"
        )


def _check_extents(op: CacheUpdate, cache: TensorType, new: TensorType) -> None:
    for axis in (0, 2, 3):
        if cache.shape[axis] != new.shape[axis]:
            raise VerifyError(
                f"{op_name(op)}: {_AXIS_NAMES[axis]} differs: cache has "
                f"{format_dim(cache.shape[axis])} but new has {format_dim(new.shape[axis])}"
            )
    cache_len, new_len = cache.shape[_LENGTH_AXIS], new.shape[_LENGTH_AXIS]
    if is_static(cache_len) and is_static(new_len) and new_len > cache_len:
        raise VerifyError(
            f"{op_name(op)}: new.len {new_len} exceeds cache.len {cache_len}; the write cannot fit"
        )


def _check_scalar(op: CacheUpdate, name: str, type_: TensorType) -> None:
    """seed: an i32 scalar, i.e. rank 0 or only literal size-1 dims."""
    scalar = all(is_static(e) and e == 1 for e in type_.shape)
    if type_.dtype != i32 or not scalar:
        raise VerifyError(
            f"{op_name(op)}: '{name}' must be an i32 scalar (rank 0 or only size-1 dims), got "
            f"{type_.dtype}{_shape_text(type_)}"
        )


@register_typeinfer(CacheUpdate)
def _typeinfer(op: CacheUpdate, arg_types, ctx) -> TensorType:
    cache, cur_pos, s, new = tensor_operands(op, arg_types)
    _check_rank4(op, "cache", cache)
    _check_rank4(op, "new", new)
    same_dtype(op, [("cache", cache), ("new", new)])
    _check_extents(op, cache, new)
    _check_scalar(op, "cur_pos", cur_pos)
    _check_scalar(op, "s", s)
    refuse_partials(
        op,
        [("cur_pos", cur_pos), ("s", s)],
        why="a write position or count must be a complete value",
    )
    check_write_sharding(op, "cache", cache, "new", new, {_LENGTH_AXIS})
    return TensorType(cache.shape, cache.dtype, cache.layout, destination_storage(op, cache, new))


register_access_relation(CacheUpdate)(NO_AFFINE_RELATION)


def _scalar(name: str, value) -> int:
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise EvalError(f"CacheUpdate: {name} must be one integer, got {array!r}")
    return int(array.reshape(()))


@register_eval(CacheUpdate)
def _eval(op: CacheUpdate, args, out_type) -> np.ndarray:
    """seed: cur_pos >= 0, 1 <= s <= new.len and cur_pos + s <= cache.len, checked here."""
    cache, new = np.asarray(args[0]), np.asarray(args[3])
    cur_pos, s = _scalar("cur_pos", args[1]), _scalar("s", args[2])
    cache_len, new_len = cache.shape[_LENGTH_AXIS], new.shape[_LENGTH_AXIS]
    if cur_pos < 0 or not 1 <= s <= new_len or cur_pos + s > cache_len:
        raise EvalError(
            f"CacheUpdate: writing {s} positions at {cur_pos} needs cur_pos >= 0, "
            f"1 <= s <= new.len ({new_len}) and cur_pos + s <= cache.len ({cache_len})"
        )
    result = np.array(cache, copy=True)
    result[:, cur_pos : cur_pos + s] = new[:, :s]
    return result


@register_sharded_eval(CacheUpdate)
def _sharded_eval(op: CacheUpdate, args, call):
    """InsertSlice's reading with the length axis as the window: each device writes its block of
    `new` into its block of `cache` (batch / heads / head_dim split alike, the length axis never
    split, which `aligned` checks); cur_pos and s are replicated scalars."""
    cache, cur_pos, s, new = args
    cache_axes = tuple(range(4))
    new_axes = tuple(None if a == _LENGTH_AXIS else a for a in range(4))
    return call.wrap(
        {
            coord: _eval(
                op,
                (
                    call.aligned(cache, coord, cache_axes),
                    call.shard(cur_pos, coord),
                    call.shard(s, coord),
                    call.aligned(new, coord, new_axes),
                ),
                None,
            )
            for coord in call.coords
        }
    )


@register_spmd_lowering(CacheUpdate)
def _spmd_lowering(op: CacheUpdate, operands, call):
    """The simulation's reading on devices: each device writes its share of `new` (cut locally
    where `new` is replicated and the cache is split) into its block of the cache; the length
    axis is never split, so cur_pos and s mean the same on every device."""
    cache, cur_pos, s, new = operands
    new_axes = tuple(None if a == _LENGTH_AXIS else a for a in range(4))
    return call.run_local(
        (call.aligned(cache, tuple(range(4))), cur_pos, s, call.aligned(new, new_axes))
    )


register_surface("cache_update", CacheUpdate)
register_fusion_kind(CacheUpdate, FusionKind.BARRIER)


@register_vjp(CacheUpdate)
def _vjp(call, ct, ad):
    """The cache keeps its cotangent outside the written window (a CacheUpdate writing zeros);
    `new[:, :s]` receives the window `ct[:, cur_pos:cur_pos + s]` and `new[:, s:]`, never
    written, zero. The window is read new.len wide from the cotangent extended by new.len zero
    positions (so a window past the cache's end never clamps, as the StableHLO lowering
    extends the cache), then masked below s: the write length is runtime data, never a shape.
    cur_pos and s are positions, with no cotangent."""
    tf = ad.tf
    _, cur_pos, s, new = call.args

    def d_new():
        length = new.type.shape[_LENGTH_AXIS]
        extended = tf.pad(ct, low=(0, 0, 0, 0), high=(0, length, 0, 0))
        start = tf.reshape(cur_pos, ())
        window = tf.dynamic_slice(extended, start, axis=_LENGTH_AXIS, size=length)
        position = tf.iota((1, length, 1, 1), i32, axis=_LENGTH_AXIS)
        written = tf.cmp_lt(position, tf.reshape(s, ()))
        return tf.where(written, window, ad.scalar(0.0, window))

    return (lambda: tf.cache_update(ct, cur_pos, s, ad.zeros_like(new)), None, None, d_new)


@register_validation_samples(CacheUpdate)
def _validation_samples() -> list[Sample]:
    position, count = constant_operand(2, i32), constant_operand(2, i32)
    return [Sample(CacheUpdate(), (operand(4, 8, 4, 4), position, count, operand(4, 2, 4, 4)))]


@register_stablehlo(CacheUpdate)
def _stablehlo(op: CacheUpdate, operands, arg_types, out_type, lw):
    """The write length s is runtime data, so the write is a mask: `new` is placed at cur_pos
    in the cache extended by new.len filler positions (so dynamic_update_slice never has to
    clamp a valid start; `new` itself is the filler), cut back to the cache length, and
    selected where cur_pos <= position < cur_pos + s. On inputs the reference accepts (cur_pos >= 0,
    1 <= s <= new.len, cur_pos + s <= cache.len) the result is the reference's; inputs it
    refuses are undefined here (the mask still keeps every position outside the cache, but
    StableHLO clamps a negative cur_pos instead of failing)."""
    cache, cur_pos, s, new = (Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True))
    cur_pos, s = cur_pos.reshape(()), s.reshape(())
    extended = concatenate([cache, new], 1)
    zero = cur_pos.full(0)
    written = extended.dynamic_update_slice(new, [zero, cur_pos, zero, zero])
    written = written.slice_axis(1, 0, cache.shape[1])
    position = iota(lw, cache.shape, 1, i32)
    start = cur_pos.broadcast_in_dim([], cache.shape)
    stop = (cur_pos + s).broadcast_in_dim([], cache.shape)
    inside = (position >= start) & (position < stop)
    return inside.select(written, cache).name


@register_pallas(CacheUpdate, reads_refs=True)
def _pallas(op: CacheUpdate, args, arg_types, out_type, kx):
    """The cache with s positions from cur_pos replaced by new's first s, as a selection
    (`kx.write_window`: a gather-load of new's Ref when it is a gmem parameter). On inputs the
    reference accepts this is its result; the ones it refuses are undefined here."""
    cache, cur_pos, s, new = args
    starts = [None, kx.scalar_start(cur_pos, 1, 0), None, None]
    counts = list(arg_types[0].shape)
    counts[_LENGTH_AXIS] = kx.scalar_start(s, 1, 0)
    return kx.write_window(cache, new, starts, counts)


@register_pallas_sharded(CacheUpdate)
def _pallas_sharded(op: CacheUpdate, args, call):
    """The simulation's reading in each CTA: its block of new written into its block of the
    cache (the length axis never split; cur_pos and s replicated scalars)."""
    new_axes = [None if a == _LENGTH_AXIS else a for a in range(4)]
    operands = (call.aligned(0, range(4)), args[1], args[2], call.aligned(3, new_axes))
    return call.local_result(operands)
