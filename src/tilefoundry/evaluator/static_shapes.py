"""Functions whose parameters all have static shapes: arguments that already match them need
none of the general checks, whose results are then known (no DimVar to bind)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.caches import Memo
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator.boundary import shape_of
from tilefoundry.evaluator.dtypes import check_dtype
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.signature import Bindings, bind_dim_vars
from tilefoundry.ir.types import TensorType

_STATIC_SHAPES = Memo("evaluator: static parameter shapes", 1024)
"""id(fn) -> `static_shapes(fn)`, kept while fn lives."""
_UNKNOWN = object()


def bind(fn: Function, values: Sequence[Any]) -> Bindings:
    """`bind_dim_vars` on the values' shapes. A function whose parameters all have static
    shapes binds nothing, so arrays of exactly those shapes need no check (any other value
    takes the general one, and its messages)."""
    shapes = _STATIC_SHAPES.get(id(fn), _UNKNOWN)
    if shapes is _UNKNOWN:
        shapes = _STATIC_SHAPES.put(id(fn), static_shapes(fn), owner=fn)
    if shapes is not None and all(
        type(v) is np.ndarray and v.shape == shape for v, shape in zip(values, shapes, strict=True)
    ):
        return {}
    return bind_dim_vars(fn.name, fn.params, [shape_of(v) for v in values])


def static_shapes(fn: Function) -> tuple[tuple[int, ...], ...] | None:
    """Each parameter's shape, or None when some parameter is not a tensor of static shape."""
    shapes = []
    for param in fn.params:
        type_ = param.type
        if not isinstance(type_, TensorType) or not all(isinstance(d, int) for d in type_.shape):
            return None
        shapes.append(tuple(type_.shape))
    return tuple(shapes)


def static_signature(fn: Function) -> tuple[tuple[tuple[int, ...], np.dtype], ...] | None:
    """(shape, numpy dtype) per parameter, or None when some parameter is not a tensor of
    static shape with a supported dtype (the general check then says what is wrong)."""
    shapes = static_shapes(fn)
    if shapes is None:
        return None
    try:
        dtypes = [check_dtype(p.type.dtype, "evaluate") for p in fn.params]
    except UnsupportedError:
        return None
    return tuple(zip(shapes, dtypes, strict=True))
