"""DynamicSlice: a window of static size whose start is runtime data (DESIGN §4.14, parser §1.7).

A loop reads one tile per iteration: `x[:, i]` under `for i in tile(K, BLOCK)`, or
`x[i * K:(i + 1) * K]` under `range`. Slice cannot say this (its bounds are attributes), so the
window is its own op: along `axis` it reads `size` elements starting at `scale * start + offset`,
where `start` is a rank-0 integer value (the induction variable) and `size`, `scale`, `offset` are
compile-time ints; every other axis is taken whole. Keeping the affine form in attributes (rather
than computing the start with Binary ops) lets the frontend prove the window in range from the
loop domain, and keeps the emitted start index a single multiply-add.

Out-of-range starts: the frontend refuses a window it can prove leaves the axis (static loop
bounds); one it cannot prove is CLAMPED into `[0, extent - size]`, exactly as StableHLO's
`dynamic_slice` does. The reference kernel clamps the same way, so the simulator and the exits
agree on every input. A window wider than the axis is refused at typeinfer.

Access relation: a translated access `x[.., d_k + s, ..]` with `s` in `[0, extent - size]` runtime
data, stated as an existential translation of the output coordinate. The shard engine reads only
projections (semantic-analysis §3.2: a translated access has no owner-boundary proof), so a Split
on the windowed axis fails closed — refused here first with the remedy — while the other axes
propagate as projections. With the windowed axis unsplit, each device's work is the kernel on its
local block (the block plan holds the windowed axis whole), so no SHARDED_EVAL or SPMD_LOWERING
rule is needed. Selection commutes with every pending reduction, so Partials carry.

Fusion: a VIEW, like Slice — the window is an index map (`d_k + start`) of its consumer's loop,
so a tile read fuses into the elementwise work of a loop body instead of being materialised.
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
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    mesh_axis_label,
    normalize_axis,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, dim_lower_bound, format_dim, i64, is_static
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

__all__ = [
    "DynamicSlice",
    "check_start",
    "clamped_start",
    "refuse_windowed_splits",
    "start_index",
    "static_int",
    "window_relation",
    "window_size_fits",
]


def static_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise VerifyError(
            f"must be a compile-time int, got {value!r}; a window's size and affine start "
            "coefficients are fixed when the program is built"
        )
    return int(value)


class DynamicSlice(Op):
    """`x[..., scale * start + offset : scale * start + offset + size, ...]` along `axis`."""

    x = ParamDef("input")
    start = ParamDef("input")
    axis = ParamDef("attribute", int)
    size = ParamDef("attribute", int, validate=static_int)
    scale = ParamDef("attribute", int, default=1, validate=static_int)
    offset = ParamDef("attribute", int, default=0, validate=static_int)


def check_start(op: Op, start: TensorType) -> None:
    """The start is one complete integer: rank 0 (or only size-1 dims), never Partial."""
    if not start.dtype.is_int or not all(is_static(e) and e == 1 for e in start.shape):
        raise VerifyError(
            f"{op_name(op)}: operand 'start' must be an integer scalar (a loop induction "
            f"variable), got {start}; index with the loop variable or a compile-time int"
        )
    refuse_partials(op, [("start", start)], why="a window position must be a complete value")


def window_size_fits(op: Op, extent: object, size: int, axis: int) -> None:
    """Refuse a window that can be wider than its axis (even the smallest extent must hold it)."""
    if size <= 0:
        raise VerifyError(f"{op_name(op)}: window size {size} must be positive")
    smallest = dim_lower_bound(extent)
    if smallest is None or smallest < size:
        raise VerifyError(
            f"{op_name(op)}: the window of {size} elements is wider than axis {axis} of extent "
            f"{format_dim(extent)}; use a window of at most the axis extent (a tile step that "
            "divides the axis)"
        )


def refuse_windowed_splits(op: Op, operands, axis: int) -> None:
    """semantic-analysis §3.2: a translated access fails closed on a Split axis."""
    for name, type_ in operands:
        for mesh_axis, (logical, _, _) in split_owners(
            f"{op_name(op)}: operand '{name}'", type_
        ).items():
            if logical == axis:
                label = mesh_axis_label(type_.layout.mesh, mesh_axis)
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' is Split on {label} along the windowed axis "
                    f"{axis}; a window at a runtime position is a translated access whose owner "
                    "boundaries the shard rule cannot prove (semantic-analysis §3.2), so it fails "
                    f"closed; insert reshard({name}, ...) to Broadcast on {label} before the loop, "
                    "window an axis that is not split, or loop over exactly one device's share "
                    "of the axis so that each device walks its own block (DESIGN §4.14)"
                )


def window_relation(rank: int, axis: int, slack: object, *, exists: bool) -> AffineAccess:
    """The windowed value read at `d_axis + s`, `s` in `[0, slack]` runtime data (a symbolic slack
    leaves the read free over the whole axis); other axes are projections. `exists=False` pins the
    windowed axis to 0 (the shard engine's view, valid once a Split there is refused)."""
    dims = ", ".join(f"d{i}" for i in range(rank))
    read = "w" if exists else "0"
    exprs = ", ".join(f"d{i}" if i != axis else read for i in range(rank))
    guard = f" : d{axis} <= w <= d{axis} + {slack}" if exists and is_static(slack) else ""
    return AffineAccess(isl.Map(f"{{ [{dims}] -> [{exprs}]{guard} }}"))


def _window_axis(op: DynamicSlice, x: TensorType) -> int:
    return normalize_axis(op, op.axis, x.rank)


def _out_shape(op: DynamicSlice, x: TensorType, axis: int) -> tuple:
    return tuple(op.size if i == axis else e for i, e in enumerate(x.shape))


def _relations(op: DynamicSlice, arg_types, *, exists: bool = True) -> AccessRelations:
    x, _ = tensor_operands(op, arg_types)
    axis = _window_axis(op, x)
    slack = x.shape[axis] - op.size if is_static(x.shape[axis]) else x.shape[axis]
    dims = ", ".join(f"d{i}" for i in range(x.rank))
    scalar = AffineAccess(isl.Map(f"{{ [{dims}] -> [] }}"))
    return AccessRelations(
        (BoundaryRelation(window_relation(x.rank, axis, slack, exists=exists)),
         BoundaryRelation(scalar)),
        (BoundaryRelation(identity_access(x.rank)),),
    )  # fmt: skip


@register_typeinfer(DynamicSlice)
def _typeinfer(op: DynamicSlice, arg_types, ctx) -> TensorType:
    x, start = tensor_operands(op, arg_types)
    check_start(op, start)
    axis = _window_axis(op, x)
    window_size_fits(op, x.shape[axis], op.size, axis)
    refuse_windowed_splits(op, [("x", x)], axis)
    out_shape = _out_shape(op, x, axis)
    layout = propagate(op, arg_types, out_shape, relations=_relations(op, arg_types, exists=False))
    return TensorType(out_shape, x.dtype, layout, result_storage(op, (x,)))


register_access_relation(DynamicSlice)(_relations)


def clamped_start(op: Op, start, extent: int, size: int) -> int:
    """`scale * start + offset` clamped into `[0, extent - size]` (StableHLO dynamic_slice)."""
    array = np.asarray(start)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise EvalError(f"{op_name(op)}: start must be one integer, got {array!r}")
    position = op.scale * int(array.reshape(())) + op.offset
    return min(max(position, 0), extent - size)


@register_eval(DynamicSlice)
def _eval(op: DynamicSlice, args, out_type) -> np.ndarray:
    x, start = np.asarray(args[0]), args[1]
    axis = op.axis % x.ndim
    begin = clamped_start(op, start, x.shape[axis], op.size)
    index = tuple(
        slice(begin, begin + op.size) if i == axis else slice(None) for i in range(x.ndim)
    )
    return x[index]


register_surface("dynamic_slice", DynamicSlice)
register_fusion_kind(DynamicSlice, FusionKind.VIEW)


@register_vjp(DynamicSlice)
def _vjp(call, ct, ad):
    """The window's cotangent written into zeros of x's type at the same (clamped) start: the
    write clamps exactly as the read did, so the two are transposes for every start."""
    op = call.target
    x, start = call.args
    return (
        lambda: ad.tf.dynamic_update_slice(
            ad.zeros_like(x), ct, start, axis=op.axis, scale=op.scale, offset=op.offset
        ),
        None,
    )


@register_validation_samples(DynamicSlice)
def _validation_samples() -> list[Sample]:
    return [
        Sample(DynamicSlice(axis=1, size=4), (operand(8, 8), constant_operand(4)), "cols 4:8"),
        Sample(DynamicSlice(axis=0, size=2, scale=2, offset=1),
               (operand(8, 4), constant_operand(1)), "rows 3:5"),
    ]  # fmt: skip


def start_index(lw, op: Op, start_name: str, start_type: TensorType) -> Value:
    """`scale * start + offset` as an i64 scalar (StableHLO clamps it)."""
    start = Value.of(lw, start_name, start_type).reshape(())
    if start.dtype != i64:
        start = start.convert(i64)
    if op.scale != 1:
        start = start * op.scale
    if op.offset:
        start = start + op.offset
    return start


@register_stablehlo(DynamicSlice)
def _stablehlo(op: DynamicSlice, operands, arg_types, out_type, lw):
    x = Value.of(lw, operands[0], arg_types[0])
    axis = op.axis % x.rank
    position = start_index(lw, op, operands[1], arg_types[1])
    zero = position.full(0)
    starts = [position if i == axis else zero for i in range(x.rank)]
    sizes = [op.size if i == axis else e for i, e in enumerate(x.shape)]
    return x.dynamic_slice(starts, sizes).name


@register_pallas(DynamicSlice, reads_refs=True)
def _pallas(op: DynamicSlice, args, arg_types, out_type, kx):
    """A tile read: from a gmem parameter's Ref only the window is loaded (`pl.ds`); the start
    is clamped into range exactly as the reference kernel and StableHLO clamp it."""
    x, start = args
    axis = op.axis % arg_types[0].rank
    position = kx.scalar_start(start, op.scale, op.offset)
    return kx.window(x, axis, position, op.size)
