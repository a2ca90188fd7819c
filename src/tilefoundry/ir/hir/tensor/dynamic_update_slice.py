"""DynamicUpdateSlice: write a tile into a window at a runtime start (DESIGN §4.14).

The write twin of DynamicSlice: `acc[:, i] = tile` under `for i in tile(K, BLOCK)` replaces the
window `[scale * start + offset, ... + size)` of `x`'s `axis` with `update` (whose extent there is
the window size, every other extent equal to `x`'s). The result is `x`'s value with the window
replaced, so it has `x`'s exact type and storage (InsertSlice's destination rule).

Out-of-range starts follow DynamicSlice's one behaviour: clamped into `[0, extent - size]`, as
StableHLO's `dynamic_update_slice` does, in the reference kernel too.

Sharding follows InsertSlice (`check_write_sharding`): no Split on the window axis, identical
Splits elsewhere, the seed's Partial rules. Each device then writes its block of `update` into its
block of `x`, which is the kernel on the local blocks, so the access relation (x read as the
identity, update read translated along the window axis) is all the block plan needs.
"""

from __future__ import annotations

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
from tilefoundry.ir.hir.op_support import normalize_axis, op_name, same_dtype, tensor_operands
from tilefoundry.ir.hir.tensor.dynamic_slice import (
    check_start,
    clamped_start,
    start_index,
    static_int,
    window_size_fits,
)
from tilefoundry.ir.hir.tensor.insert_slice import check_write_sharding, destination_storage
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, format_dim, is_static
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
from tilefoundry.rules.validation_samples import Sample, constant_operand, operand

__all__ = ["DynamicUpdateSlice", "check_tile_shape"]


class DynamicUpdateSlice(Op):
    """`x` with `x[..., scale * start + offset : ... + update.shape[axis], ...] = update`."""

    x = ParamDef("input")
    update = ParamDef("input")
    start = ParamDef("input")
    axis = ParamDef("attribute", int)
    scale = ParamDef("attribute", int, default=1, validate=static_int)
    offset = ParamDef("attribute", int, default=0, validate=static_int)


def check_tile_shape(op: Op, x: TensorType, update: TensorType, axis: int) -> None:
    """A written tile has x's rank and x's extents on every axis but the window's."""
    if update.rank != x.rank:
        raise VerifyError(
            f"{op_name(op)}: 'update' has rank {update.rank} but 'x' has rank {x.rank}; "
            "reshape the tile to x's rank"
        )
    for i, (a, b) in enumerate(zip(x.shape, update.shape, strict=True)):
        if i != axis and a != b:
            raise VerifyError(
                f"{op_name(op)}: 'update' extent {format_dim(b)} differs from 'x' extent "
                f"{format_dim(a)} on axis {i}, which the window takes whole; write a tile that "
                "spans the other axes"
            )


def _window(op: DynamicUpdateSlice, x: TensorType, update: TensorType) -> tuple[int, int]:
    """(axis, size): the window axis and the update's static extent along it."""
    axis = normalize_axis(op, op.axis, x.rank)
    check_tile_shape(op, x, update, axis)
    size = update.shape[axis]
    if not is_static(size):
        raise VerifyError(
            f"{op_name(op)}: the window size {format_dim(size)} on axis {axis} must be a "
            "compile-time int; write a tile of static extent"
        )
    return axis, size


def _relations(op: DynamicUpdateSlice, arg_types) -> AccessRelations:
    x, update, _ = tensor_operands(op, arg_types)
    axis, size = _window(op, x, update)
    dims = ", ".join(f"d{i}" for i in range(x.rank))
    reads = ", ".join(f"d{i}" if i != axis else "w" for i in range(x.rank))
    slack = f"{x.shape[axis]} - {size}" if is_static(x.shape[axis]) else None
    guard = f"0 <= w < {size}"
    if slack is not None:
        guard += f" and d{axis} - ({slack}) <= w <= d{axis}"
    update_read = AffineAccess(isl.Map(f"{{ [{dims}] -> [{reads}] : {guard} }}"))
    scalar = AffineAccess(isl.Map(f"{{ [{dims}] -> [] }}"))
    return AccessRelations(
        tuple(BoundaryRelation(a) for a in (identity_access(x.rank), update_read, scalar)),
        (BoundaryRelation(identity_access(x.rank)),),
    )


@register_typeinfer(DynamicUpdateSlice)
def _typeinfer(op: DynamicUpdateSlice, arg_types, ctx) -> TensorType:
    x, update, start = tensor_operands(op, arg_types)
    same_dtype(op, [("x", x), ("update", update)])
    axis, size = _window(op, x, update)
    check_start(op, start)
    window_size_fits(op, x.shape[axis], size, axis)
    check_write_sharding(op, "x", x, "update", update, {axis})
    return TensorType(x.shape, x.dtype, x.layout, destination_storage(op, x, update))


register_access_relation(DynamicUpdateSlice)(_relations)


@register_eval(DynamicUpdateSlice)
def _eval(op: DynamicUpdateSlice, args, out_type) -> np.ndarray:
    x, update = np.asarray(args[0]), np.asarray(args[1])
    axis = op.axis % x.ndim
    size = update.shape[axis]
    begin = clamped_start(op, args[2], x.shape[axis], size)
    result = np.array(x, copy=True)
    index = tuple(slice(begin, begin + size) if i == axis else slice(None) for i in range(x.ndim))
    result[index] = update
    return result


register_surface("dynamic_update_slice", DynamicUpdateSlice)
register_fusion_kind(DynamicUpdateSlice, FusionKind.BARRIER)


@register_vjp(DynamicUpdateSlice)
def _vjp(call, ct, ad):
    """x keeps its cotangent outside the (clamped) window, the update receives the window."""
    op = call.target
    _, update, start = call.args
    window = {"axis": op.axis, "scale": op.scale, "offset": op.offset}
    size = update.type.shape[op.axis % update.type.rank]
    return (
        lambda: ad.tf.dynamic_update_slice(ct, ad.zeros_like(update), start, **window),
        lambda: ad.tf.dynamic_slice(ct, start, size=size, **window),
        None,
    )


@register_validation_samples(DynamicUpdateSlice)
def _validation_samples() -> list[Sample]:
    return [
        Sample(
            DynamicUpdateSlice(axis=1),
            (operand(8, 8), operand(8, 4), constant_operand(1)),
            "cols 1:5",
        )
    ]


@register_stablehlo(DynamicUpdateSlice)
def _stablehlo(op: DynamicUpdateSlice, operands, arg_types, out_type, lw):
    x = Value.of(lw, operands[0], arg_types[0])
    update = Value.of(lw, operands[1], arg_types[1])
    axis = op.axis % x.rank
    position = start_index(lw, op, operands[2], arg_types[2])
    zero = position.full(0)
    return x.dynamic_update_slice(
        update, [position if i == axis else zero for i in range(x.rank)]
    ).name


@register_pallas(DynamicUpdateSlice)
def _pallas(op: DynamicUpdateSlice, args, arg_types, out_type, kx):
    """A tile write into a kernel value, the start clamped as the reference kernel clamps it."""
    x, update, start = args
    axis = op.axis % x.ndim
    size = update.shape[axis]
    position = kx.scalar_start(start, op.scale, op.offset)
    position = kx.lax.clamp(0, position, x.shape[axis] - size)
    return kx.write_window(x, update, [position if a == axis else None for a in range(x.ndim)])
