"""Pad: edge and interior padding by a constant, StableHLO's `pad` (and the transpose of Slice).

`low[i]` / `high[i]` elements of `value` go before / after axis i, and `interior[i]` between each
pair of neighbours, so axis i grows to `low + high + n + max(n - 1, 0) * interior`. Negative
edge padding removes elements from that end (applied after the interior padding, as StableHLO
does), which makes Pad the exact transpose of every Slice: a window `begin:end:step` of an axis
of extent n is undone by `low = begin`, `interior = step - 1`, `high = n - 1 - last` (last is
the window's last index), zeros everywhere else.

Sharding: a padded axis is a whole (existential) axis of the relation (`whole_axis`): a device
holding part of it would pad its own block's ends, so a Split there fails closed, and a Split on
an axis left alone carries. Every output element is an input element or `value`, so Partial(max)
and Partial(min) carry (max over devices of one constant is that constant), and Partial(sum)
carries exactly when `value` is zero (n devices' constants would otherwise add to n * value).
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    number_attribute,
    numpy_dtype,
    propagate,
    refuse_partials,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.hir.tensor.slice import Slice, windows
from tilefoundry.ir.hir.whole_axis import reads_except, refuse_splits_on, whole_axis_relations
from tilefoundry.ir.types import DType, TensorType, dim_lower_bound, f8e8m0, format_dim
from tilefoundry.ir.types.shard.int_tuple import is_int
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


def _ints(value: object) -> tuple:
    if not isinstance(value, tuple) or not all(is_int(v) for v in value):
        raise VerifyError(f"must be a tuple of static ints, one per axis, got {value!r}")
    return tuple(int(v) for v in value)


def _interior(value: object) -> tuple:
    value = _ints(value)
    if any(v < 0 for v in value):
        raise VerifyError(f"interior padding cannot be negative, got {value!r}")
    return value


class Pad(Op):
    """`x` padded with `value`: `low`/`high` at the ends of each axis, `interior` between."""

    x = ParamDef("input")
    low = ParamDef("attribute", tuple, validate=_ints)
    high = ParamDef("attribute", tuple, validate=_ints)
    interior = ParamDef("attribute", tuple, validate=_interior, optional=True)
    value = ParamDef("attribute", validate=number_attribute, default=0)


def paddings(op: Pad, rank: int) -> tuple[tuple[int, int, int], ...]:
    """(low, high, interior) per axis; `interior=None` is no interior padding."""
    interior = op.interior if op.interior is not None else (0,) * len(op.low)
    if not len(op.low) == len(op.high) == len(interior) == rank:
        raise VerifyError(
            f"Pad: low {op.low}, high {op.high} and interior {op.interior} must each have one "
            f"entry per axis of operand 'x' (rank {rank})"
        )
    return tuple(zip(op.low, op.high, interior, strict=True))


def padded_axes(op: Pad, rank: int) -> frozenset[int]:
    return frozenset(i for i, p in enumerate(paddings(op, rank)) if p != (0, 0, 0))


def _padded_extent(axis: int, extent, low: int, high: int, interior: int):
    if (low, high, interior) == (0, 0, 0):
        return extent
    if not is_int(extent):
        smallest = dim_lower_bound(extent)
        if low < 0 or high < 0 or (interior and (smallest is None or smallest < 1)):
            raise VerifyError(
                f"Pad: axis {axis} has the symbolic extent {format_dim(extent)}; negative edge "
                "padding, or interior padding of a possibly empty axis, has no static result "
                "extent there (pad a static axis, or bound the DimVar below by 1)"
            )
        return extent + low + high + (extent - 1) * interior
    size = low + high + extent + max(extent - 1, 0) * interior
    if size < 0:
        raise VerifyError(
            f"Pad: axis {axis} of extent {extent} padded by low {low}, high {high}, interior "
            f"{interior} would have the negative extent {size}; remove fewer elements"
        )
    return size


def _check_value(op: Pad, dtype: DType) -> None:
    value = op.value
    if dtype.is_bool:
        if value not in (0, 1):
            raise VerifyError(f"Pad: 'value' {value!r} is not a bool, but 'x' is bool")
        return
    if dtype.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise VerifyError(
                f"Pad: 'value' {value!r} is not an integer, but 'x' is {dtype}; write an int"
            )
        info = np.iinfo(numpy_dtype(dtype))
        if not info.min <= value <= info.max:
            raise VerifyError(
                f"Pad: 'value' {value!r} does not fit {dtype} ({info.min}..{info.max})"
            )
    elif dtype == f8e8m0 and not value > 0:
        raise VerifyError(
            f"Pad: 'value' {value!r} is not positive, and f8e8m0 holds only powers of two"
        )


@register_typeinfer(Pad)
def _typeinfer(op: Pad, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    pads = paddings(op, x.rank)
    _check_value(op, x.dtype)
    out_shape = tuple(
        _padded_extent(axis, extent, *pad)
        for axis, (extent, pad) in enumerate(zip(x.shape, pads, strict=True))
    )
    zero = op.value == 0
    refuse_partials(
        op,
        (("x", x),),
        allowed=("max", "min", "sum") if zero else ("max", "min"),
        why=f"every device would add its own padding constant {op.value!r} to the pending sum "
        "(only a zero constant keeps the sum)",
    )
    refuse_splits_on(
        op,
        (("x", x, padded_axes(op, x.rank)),),
        "that axis is padded, and a device padding its own block would pad the wrong positions",
    )
    layout = propagate(op, (x,), out_shape, relations=_relation(op, (x,), exists=False))
    return TensorType(out_shape, x.dtype, layout, result_storage(op, (x,)))


@register_access_relation(Pad)
def _relation(op: Pad, arg_types, *, exists: bool = True):
    """Domain = the unpadded axes; each padded axis is read and written whole by an instance."""
    (x,) = tensor_operands(op, arg_types)
    reads = reads_except(x.rank, padded_axes(op, x.rank))
    return whole_axis_relations(
        x.rank - len(padded_axes(op, x.rank)), [reads], [reads], exists=exists
    )


@register_eval(Pad)
def _eval(op: Pad, args, out_type: TensorType) -> np.ndarray:
    """Interior and positive edge padding by placing `x` into a filled array with a stride,
    then negative edges cropped, as StableHLO orders them."""
    x = np.asarray(args[0])
    grown, placed, cropped = [], [], []
    for n, (low, high, interior) in zip(x.shape, paddings(op, x.ndim), strict=True):
        before, after = max(low, 0), max(high, 0)
        size = before + after + n + max(n - 1, 0) * interior
        grown.append(size)
        placed.append(slice(before, before + n * (interior + 1), interior + 1))
        cropped.append(slice(max(-low, 0), size - max(-high, 0)))
    out = np.full(grown, op.value, dtype=numpy_dtype(out_type.dtype))
    out[tuple(placed)] = x
    return out[tuple(cropped)]


register_surface("pad", Pad)
register_fusion_kind(Pad, FusionKind.BARRIER)


@register_vjp(Pad)
def _vjp(call, ct, ad):
    """`lax.pad`'s transpose: the strided slice of the cotangent that reads back every element
    of x (begin = low, step = interior + 1). A negative edge cropped elements of x, which
    receive zero: the cotangent is first zero-padded there (Pad with the negated edges: a
    negative low becomes padding, the rest of the cropping stays a crop of 0). The padding
    constant is an attribute, with no cotangent."""
    (x,) = call.args
    pads = paddings(call.target, x.type.rank)

    def d_x():
        cotangent = ct
        if any(low < 0 or high < 0 for low, high, _ in pads):
            cotangent = ad.tf.pad(
                cotangent,
                low=tuple(max(-low, 0) for low, _, _ in pads),
                high=tuple(max(-high, 0) for _, high, _ in pads),
            )
        windows = [_read_back(n, pad) for n, pad in zip(x.type.shape, pads, strict=True)]
        begin, end, steps = (tuple(w[k] for w in windows) for k in range(3))
        return ad.tf.slice(cotangent, begin, end, strides=steps)

    return (d_x,)


def _read_back(extent, pad: tuple[int, int, int]) -> tuple:
    """(begin, end, step) of the window of the padded axis that holds x's elements, in the
    coordinates before negative edges crop it; an axis left alone is taken whole."""
    low, _, interior = pad
    if pad == (0, 0, 0):
        return None, None, None
    begin = max(low, 0)
    return begin, begin + (extent - 1) * (interior + 1) + 1 if extent else begin, interior + 1


@register_validation_samples(Pad)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Pad(low=(0, 1), high=(0, 2)), (operand(4, 8),), "edges, zero"),
        Sample(Pad(low=(0, 2), high=(0, 0), value=1.5), (operand(8, 4),), "edges, 1.5"),
        # to a power-of-two extent, as a tile padded for Triton is
        Sample(Pad(low=(0, 2), high=(0, 2), value=-1.0), (operand(8, 4),), "edges to a tile"),
        Sample(
            Pad(low=(0, -1), high=(0, 1), interior=(0, 1), value=-2.0),
            (operand(4, 4),),
            "interior, negative edge",
            False,
        ),
    ]


@register_stablehlo(Pad)
def _stablehlo(op: Pad, operands, arg_types, out_type, lw):
    (x_type,) = arg_types
    pads = paddings(op, x_type.rank)
    value = lw.constant(op.value, x_type.dtype)
    scalar = lw.type(TensorType((), x_type.dtype))

    def listed(k: int) -> str:
        return f"[{', '.join(str(p[k]) for p in pads)}]"

    return lw.op(
        f"stablehlo.pad {operands[0]}, {value}, low = {listed(0)}, high = {listed(1)}, "
        f"interior = {listed(2)} : ({lw.type(x_type)}, {scalar}) -> {lw.type(out_type)}"
    )


@register_pallas(Pad)
def _pallas(op: Pad, args, arg_types, out_type, kx):
    (x,) = args
    value = kx.jnp.asarray(op.value, kx.dtype(out_type.dtype))
    return kx.pad(x, value, paddings(op, x.ndim))


def pad_undoing(op: Slice, shape: tuple) -> Pad:
    """The zero Pad that puts a Slice's result back where it was read from, in an array of the
    sliced operand's `shape` (static extents): Slice's transpose, for its VJP. A squeezed axis
    (an integer index) must be re-inserted as extent 1 before this Pad applies."""
    pads = []
    for window, extent in zip(windows(op, shape), shape, strict=True):
        last = window.start + window.step * (window.extent - 1)
        if window.extent == 0:
            pads.append((extent, 0, 0))
        else:
            pads.append((window.start, extent - 1 - last, window.step - 1))
    low, high, interior = zip(*pads, strict=True) if pads else ((), (), ())
    return Pad(low=tuple(low), high=tuple(high), interior=tuple(interior))
