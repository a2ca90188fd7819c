"""Physical layouts at the function boundary: a plain `Layout` on a parameter or result is honoured.

A parameter whose type carries a plain Layout is handed to the body as a strided view over a flat
buffer of `cosize` elements, written through the layout, so kernels really run on that physical
form (a column-major parameter arrives as a Fortran-ordered view); a result with a plain Layout is
written into such a buffer and read back through it. Logical values never change, which is what
makes "column-major parameter == row-major result" a test of every kernel's stride handling.
ShardLayouts are not physical here: a sharded value is held as per-device logical blocks.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Layout
from tilefoundry.ir.types.shard.int_tuple import flatten, is_int


def has_physical_layout(type_: TensorType) -> bool:
    """A plain Layout with materialised strides; None strides are un-materialised sugar."""
    return isinstance(type_.layout, Layout) and type_.layout.stride is not None


def _axis_offsets(layout: Layout, shape: tuple[int, ...]) -> list[np.ndarray]:
    """Per logical axis, the buffer offset of each coordinate (a nested mode maps colex)."""
    modes = layout.modes() if shape else ()
    return [
        np.array([mode(i) for i in range(extent)], dtype=np.int64)
        for mode, extent in zip(modes, shape, strict=True)
    ]


def _check_static(layout: Layout, where: str) -> None:
    values = flatten(layout.shape) + flatten(layout.stride)
    if not all(is_int(v) for v in values) or any(s < 0 for s in flatten(layout.stride)):
        raise UnsupportedError(
            f"{where}: the physical layout {layout} needs static shape and non-negative strides "
            "for the reference evaluator to lay the value out"
        )


def store_physical(array: np.ndarray, layout: Layout, where: str) -> np.ndarray:
    """`array` written through `layout` into a flat buffer; returns the logical view onto it."""
    _check_static(layout, where)
    shape = array.shape
    buffer = np.zeros(int(layout.cosize()) if array.size else 0, dtype=array.dtype)
    if not array.size:
        return array.copy()
    if all(is_int(mode) for mode in (layout.shape if isinstance(layout.shape, tuple) else ())):
        strides = tuple(int(s) * array.itemsize for s in layout.stride)
        view = np.lib.stride_tricks.as_strided(buffer, shape=shape, strides=strides)
        view[...] = array
        return view
    offsets = _linear_offsets(layout, shape)
    buffer[offsets] = array
    return buffer[offsets]


def load_physical(array: np.ndarray, layout: Layout, where: str) -> np.ndarray:
    """The logical array read back through `layout` after storing `array` with it (a copy)."""
    return np.array(store_physical(np.asarray(array), layout, where), copy=True)


def _linear_offsets(layout: Layout, shape: tuple[int, ...]) -> np.ndarray:
    total = np.zeros(shape, dtype=np.int64)
    for axis, offsets in enumerate(_axis_offsets(layout, shape)):
        total = total + offsets.reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return total
