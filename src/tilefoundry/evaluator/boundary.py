"""The function boundary: checking inputs, binding DimVars, placing parameters, reading results.

Inputs are checked one by one against their parameter (count, rank, extents, dtype) so the error
names the parameter; DimVars bind from the concrete shapes (hir §1.1), and a conflict or an
out-of-envelope value is the caller's mistake (EvalError). Parameters are then placed: scattered
over their mesh (DESIGN §4.12) or laid out physically (a plain Layout), and results are gathered
and read back through their layout the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.evaluator.dtypes import check_dtype
from tilefoundry.evaluator.layouts import has_physical_layout, load_physical, store_physical
from tilefoundry.evaluator.values import MeshValue, gather, scatter
from tilefoundry.ir.core import Var
from tilefoundry.ir.types import DimVar, TensorType, TupleType, Type, resolve_dim
from tilefoundry.ir.types.shard import ShardLayout

Bindings = dict[DimVar, int]


def shape_of(value: Any) -> tuple[int, ...] | None:
    """The concrete global shape of an evaluator value (None for a tuple)."""
    if isinstance(value, MeshValue):
        return value.shape
    if isinstance(value, tuple):
        return None
    return tuple(np.shape(value))


def bind_dims(fn_name: str, params: Sequence[Var], shapes: Sequence[Any]) -> Bindings:
    """DimVar -> extent from the argument shapes; ranks and static extents are checked too."""
    bindings: Bindings = {}
    seen: dict[DimVar, str] = {}
    derived: list[tuple[Any, int, str]] = []
    for param, shape in zip(params, shapes, strict=True):
        if not isinstance(param.type, TensorType) or shape is None:
            continue
        where = f"Function {fn_name}: parameter '{param.name}'"
        declared = param.type.shape
        if len(shape) != len(declared):
            raise EvalError(
                f"{where} has rank {len(declared)} {list(declared)}, got an array of shape "
                f"{tuple(shape)}"
            )
        for axis, (dim, extent) in enumerate(zip(declared, shape, strict=True)):
            at = f"{where} axis {axis}"
            if isinstance(dim, int):
                if dim != extent:
                    raise EvalError(f"{at} has extent {dim}, got {extent} (shape {tuple(shape)})")
            elif isinstance(dim, DimVar):
                _bind(bindings, seen, dim, int(extent), at)
            else:
                derived.append((dim, int(extent), at))
    for dim, extent, at in derived:
        try:
            value = resolve_dim(dim, bindings)
        except VerifyError:
            raise EvalError(
                f"{at} has extent {dim}, which no parameter axis binds on its own; "
                "give some parameter an axis of just the DimVar"
            ) from None
        if value != extent:
            raise EvalError(f"{at} has extent {dim} = {value}, got {extent}")
    return bindings


def _bind(bindings: Bindings, seen: dict[DimVar, str], var: DimVar, extent: int, at: str) -> None:
    if var in bindings and bindings[var] != extent:
        raise EvalError(
            f"DimVar {var.name} is bound to {bindings[var]} by {seen[var]} but to {extent} by {at}"
        )
    if not var.lo <= extent < var.hi:
        raise EvalError(
            f"{at}: DimVar {var.name}={extent} lies outside its envelope [{var.lo}, {var.hi})"
        )
    bindings[var] = extent
    seen.setdefault(var, at)


def check_input(fn_name: str, param: Var, array: Any) -> np.ndarray:
    """The argument as an ndarray of exactly the parameter's dtype (no silent conversion)."""
    where = f"Function {fn_name}: parameter '{param.name}'"
    if not isinstance(param.type, TensorType):
        raise UnsupportedError(f"{where}: the evaluator takes tensor parameters, not {param.type}")
    expected = check_dtype(param.type.dtype, where)
    value = np.asarray(array)
    if value.dtype != expected:
        raise EvalError(
            f"{where} is {param.type.dtype.name} ({expected}), got an array of dtype "
            f"{value.dtype}; convert it with .astype(...) first"
        )
    return value


def place_input(fn_name: str, param: Var, array: np.ndarray, index: int) -> Any:
    """The body's view of a checked argument: scattered, physically laid out, or as given."""
    where = f"Function {fn_name}: parameter '{param.name}'"
    type_ = param.type
    if isinstance(type_.layout, ShardLayout):
        return scatter(array, type_, where, seed=index)
    if has_physical_layout(type_):
        return store_physical(array, type_.layout, where)
    return array


def read_result(value: Any, type_: Type, where: str, *, complete_partials: bool) -> Any:
    """Global arrays of a result: gathered over its mesh, read back through a plain layout."""
    if isinstance(type_, TupleType):
        return tuple(
            read_result(v, t, f"{where} field {i}", complete_partials=complete_partials)
            for i, (v, t) in enumerate(zip(value, type_.fields, strict=True))
        )
    if isinstance(value, MeshValue):
        return gather(value, where, complete_partials=complete_partials)
    array = np.asarray(value)
    if isinstance(type_, TensorType) and has_physical_layout(type_):
        return load_physical(array, type_.layout, where)
    return np.array(array, copy=True)
