"""Slice (hir tensor, consensus numpy basic slicing): a static strided window of `x`.

`begin` / `end` / `strides` hold one entry per leading axis of `x` (numpy: trailing axes are
taken whole); `None` means the numpy default. Negative indices count from the end and out-of-range
ones clamp, exactly like numpy, so the result extent is `len(range(*slice(b, e, s).indices(n)))`.
Only a positive step is supported (the seed names no other).

Integer indexing (`x[i]`, which drops the axis) is the `squeeze_axes` attribute: those input axes
must select exactly one element and are removed from the result. One op therefore spells the whole
subscript `x[:, :, 3]`, and its relation reads a dropped axis at a constant, which the shared
engine already refuses to carry a Split through.

Sharding: a window is an affine translation of the read index, which the engine has no owner-
boundary proof for; a Split therefore survives only on an axis taken whole, and this rule refuses
a windowed Split axis up front (the engine would see `begin=0, step=1` as a plain projection).
Selection commutes with every pending reduction, so Partials carry.
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
from tilefoundry.ir.hir.op_support import (
    mesh_axis_label,
    normalize_axis,
    propagate,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, dim_lower_bound, format_dim
from tilefoundry.ir.types.shard import ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten, is_int
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
from tilefoundry.sharding.shard_regroup import logical_axis_of


def _check_indices(value: object) -> tuple:
    if not isinstance(value, tuple):
        raise VerifyError(f"must be a tuple with one entry per sliced axis, got {value!r}")
    for entry in value:
        if entry is not None and not is_int(entry):
            raise VerifyError(f"entries must be static ints or None, got {entry!r}")
    return value


class Slice(Op):
    """`x[begin:end:strides, ...]`, with the `squeeze_axes` of an integer index dropped."""

    x = ParamDef("input")
    begin = ParamDef("attribute", tuple, validate=_check_indices)
    end = ParamDef("attribute", tuple, validate=_check_indices)
    strides = ParamDef("attribute", tuple, validate=_check_indices, optional=True)
    squeeze_axes = ParamDef("attribute", tuple, default=())


class _Window:
    """One axis of the slice, normalised against the axis extent (numpy's `slice.indices`)."""

    def __init__(self, start: int, step: int, extent: object, whole: bool):
        self.start, self.step, self.extent, self.whole = start, step, extent, whole


def windows(op: Slice, shape: tuple) -> tuple[_Window, ...]:
    """Per input axis: where the window starts, its step and extent (the numpy formula)."""
    rank = len(shape)
    steps = op.strides if op.strides is not None else (None,) * len(op.begin)
    if not len(op.begin) == len(op.end) == len(steps):
        raise VerifyError(
            f"Slice: begin {op.begin}, end {op.end} and strides {op.strides} must have the same "
            "length (one entry per sliced axis)"
        )
    if len(op.begin) > rank:
        raise VerifyError(
            f"Slice: {len(op.begin)} sliced axes for operand 'x' of rank {rank}; give at most "
            "one entry per axis"
        )
    result = []
    for axis, extent in enumerate(shape):
        if axis >= len(op.begin):
            result.append(_Window(0, 1, extent, True))
            continue
        result.append(_window(axis, extent, op.begin[axis], op.end[axis], steps[axis]))
    return tuple(result)


def _window(axis: int, extent: object, begin, end, step) -> _Window:
    step = 1 if step is None else step
    if step <= 0:
        raise VerifyError(
            f"Slice: axis {axis} has step {step}; only a positive step is supported (reverse "
            "with a positive-step slice of a transposed/flipped value instead)"
        )
    if not is_int(extent):
        if begin in (None, 0) and end is None and step == 1:
            return _Window(0, 1, extent, True)
        window = _provable_window(extent, begin, end, step)
        if window is not None:
            return window
        raise VerifyError(
            f"Slice: axis {axis} has the symbolic extent {format_dim(extent)}, so negative or "
            "clamped indices cannot be resolved statically; take the whole axis (begin None/0, "
            "end None, step 1) or a window inside its smallest extent (the DimVar's lower bound)"
        )
    start, stop, step = slice(begin, end, step).indices(extent)
    count = len(range(start, stop, step))
    return _Window(start, step, count, count == extent)


def _provable_window(extent: object, begin, end, step: int) -> _Window | None:
    """A window of a symbolic axis that lies inside the axis's smallest extent (the DimVar's
    lower bound, e.g. `x[0:1]` when N >= 1): numpy's clamping never applies, so it is static."""
    begin = 0 if begin is None else begin
    smallest = dim_lower_bound(extent)
    if end is None or begin < 0 or end < begin or smallest is None or end > smallest:
        return None
    return _Window(begin, step, len(range(begin, end, step)), False)


def _squeezed(op: Slice, wins: tuple[_Window, ...]) -> frozenset[int]:
    rank = len(wins)
    axes = [normalize_axis(op, a, rank, "squeeze_axes entry") for a in op.squeeze_axes]
    if len(set(axes)) != len(axes):
        raise VerifyError(f"Slice: squeeze_axes {op.squeeze_axes} names an axis twice")
    for axis in axes:
        if not (is_int(wins[axis].extent) and wins[axis].extent == 1):
            raise VerifyError(
                f"Slice: squeeze_axes drops axis {axis}, whose window holds "
                f"{format_dim(wins[axis].extent)} elements; an integer index selects exactly one"
            )
    return frozenset(axes)


def _refuse_windowed_splits(x: TensorType, wins: tuple[_Window, ...], dropped) -> None:
    sl = x.layout
    if not isinstance(sl, ShardLayout):
        return
    layout_shape = tuple(flatten(sl.layout.shape))
    for mesh_axis, attr in enumerate(sl.attrs):
        if not isinstance(attr, Split):
            continue
        label = mesh_axis_label(sl.mesh, mesh_axis)
        try:
            axis, _ = logical_axis_of(x.shape, layout_shape, attr.axis, "operand 'x'", label)
        except VerifyError as err:
            raise VerifyError(f"Slice: {err.message}") from None
        if not wins[axis].whole or axis in dropped:
            raise VerifyError(
                f"Slice: operand 'x' is Split on {label} along axis {axis}, which the slice "
                "takes only part of; a window is a translated access whose owner boundaries "
                f"the shard rule cannot prove (semantic-analysis §3.2), so it fails closed; "
                f"insert reshard(x, ...) to Broadcast on {label} before slicing"
            )


def _out_shape(wins: tuple[_Window, ...], dropped) -> tuple:
    return tuple(w.extent for axis, w in enumerate(wins) if axis not in dropped)


@register_typeinfer(Slice)
def _typeinfer(op: Slice, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    wins = windows(op, x.shape)
    dropped = _squeezed(op, wins)
    _refuse_windowed_splits(x, wins, dropped)
    out_shape = _out_shape(wins, dropped)
    layout = propagate(op, arg_types, out_shape)
    return TensorType(out_shape, x.dtype, layout, result_storage(op, (x,)))


@register_access_relation(Slice)
def _relation(op: Slice, arg_types) -> AccessRelations:
    """Domain = output coordinates; input axis i reads `start_i + step_i * d_j`, or the constant
    `start_i` on a dropped axis."""
    (x,) = tensor_operands(op, arg_types)
    wins = windows(op, x.shape)
    dropped = _squeezed(op, wins)
    rank = x.rank - len(dropped)
    exprs, j = [], 0
    for axis, w in enumerate(wins):
        if axis in dropped:
            exprs.append(str(w.start))
            continue
        exprs.append(f"{w.start} + {w.step}*d{j}")
        j += 1
    dims = ", ".join(f"d{i}" for i in range(rank))
    access = AffineAccess(isl.Map(f"{{ [{dims}] -> [{', '.join(exprs)}] }}"))
    return AccessRelations((BoundaryRelation(access),), (BoundaryRelation(identity_access(rank)),))


@register_eval(Slice)
def _eval(op: Slice, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    steps = op.strides if op.strides is not None else (None,) * len(op.begin)
    index = tuple(slice(b, e, s) for b, e, s in zip(op.begin, op.end, steps, strict=True))
    window = x[index]
    axes = tuple(a % x.ndim for a in op.squeeze_axes)
    return np.squeeze(window, axis=axes) if axes else window


register_surface("slice", Slice)


@register_vjp(Slice)
def _vjp(call, ct, ad):
    """The transpose of taking a window is a zero pad putting the cotangent back where it was
    read from (`pad.pad_undoing`, interior padding for a strided window); an integer index's
    dropped axis is restored first."""
    from tilefoundry.ir.hir.tensor.pad import pad_undoing  # pad.py builds on this module

    op = call.target
    (x,) = call.args
    shape = tuple(x.type.shape)
    wins = windows(op, shape)

    def d_x():
        window = tuple(w.extent for w in wins)
        full = ad.tf.reshape(ct, window) if _squeezed(op, wins) else ct
        return ad.tf.pad(full, **pad_undoing(op, shape).attributes())

    return (d_x,)


register_fusion_kind(Slice, FusionKind.VIEW)


@register_validation_samples(Slice)
def _validation_samples() -> list[Sample]:
    strided = Slice(begin=(0, 0), end=(8, 8), strides=(2, 1))
    return [
        Sample(Slice(begin=(0, 0), end=(4, 8)), (operand(8, 8),), "rows 0:4"),
        Sample(strided, (operand(8, 8),), "stride 2", False),
    ]


@register_stablehlo(Slice)
def _stablehlo(op: Slice, operands, arg_types, out_type, lw):
    """`stablehlo.slice` over numpy's normalised windows, then a reshape drops squeezed axes."""
    x = Value.of(lw, operands[0], arg_types[0])
    wins = windows(op, x.shape)
    starts = [w.start for w in wins]
    limits = [w.start + w.step * (w.extent - 1) + 1 if w.extent else w.start for w in wins]
    window = x.slice(starts, limits, [w.step for w in wins])
    return window.reshape(lw.shape(out_type)).name


@register_pallas(Slice, reads_refs=True)
def _pallas(op: Slice, args, arg_types, out_type, kx):
    """The reference kernel's static window: of a gmem parameter, a read of only the window
    from its Ref (which Triton lowers as a load); of a jnp value, a slice."""
    (x,) = args
    steps = op.strides if op.strides is not None else (None,) * len(op.begin)
    index = tuple(slice(b, e, s) for b, e, s in zip(op.begin, op.end, steps, strict=True))
    window = kx.static_window(x, index)
    axes = tuple(a % window.ndim for a in op.squeeze_axes)
    return kx.jnp.squeeze(window, axis=axes) if axes else window
