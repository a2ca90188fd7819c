"""The function boundary: placing parameters, reading results.

Inputs are checked against their parameters before they get here, by
`ir.hir.signature.check_arguments` (count, dtype, rank, extents, DimVars), the one check the
exits share, so every error names the parameter. Parameters are then placed: scattered over
their mesh (DESIGN §4.12) or laid out physically (a plain Layout), and results are gathered
and read back through their layout the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilefoundry.evaluator.layouts import has_physical_layout, load_physical, store_physical
from tilefoundry.evaluator.values import MeshValue, gather, is_replicated_type, scatter
from tilefoundry.ir.core import Var
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import ShardLayout


def shape_of(value: Any) -> tuple[int, ...] | None:
    """The concrete global shape of an evaluator value (None for a tuple)."""
    if isinstance(value, MeshValue):
        return value.shape
    if isinstance(value, tuple):
        return None
    return tuple(np.shape(value))


def place_input(fn_name: str, param: Var, array: np.ndarray, index: int) -> Any:
    """The body's view of a checked argument: scattered, physically laid out, or as given."""
    where = f"Function {fn_name}: parameter '{param.name}'"
    type_ = param.type
    if isinstance(type_.layout, ShardLayout):
        if is_replicated_type(type_):
            return array  # one global value (DESIGN §4.12), not eight copies of it
        return scatter(array, type_, where, seed=index)
    if has_physical_layout(type_):
        return store_physical(array, type_.layout, where)
    return array


def read_result(
    value: Any, type_: Type, where: str, *, complete_partials: bool, borrowed: Any = None
) -> Any:
    """Global arrays of a result: gathered over its mesh, read back through a plain layout.

    A plain result is handed out as is when the evaluator owns it (a kernel's fresh array) and
    copied otherwise: a view, one of the caller's `borrowed` input arrays returned unchanged, or
    an array already handed out in another field (appended to `borrowed`, a list), so the caller
    never gets an alias of its inputs, of the IR's constants or of another result. Without
    `borrowed` every result is copied."""
    if isinstance(type_, TupleType):
        return tuple(
            read_result(
                v, t, f"{where} field {i}", complete_partials=complete_partials, borrowed=borrowed
            )
            for i, (v, t) in enumerate(zip(value, type_.fields, strict=True))
        )
    if isinstance(value, MeshValue):
        return gather(value, where, complete_partials=complete_partials)
    array = np.asarray(value)
    if isinstance(type_, TensorType) and has_physical_layout(type_):
        return load_physical(array, type_.layout, where)
    owned = borrowed is not None and array.flags.owndata and array is value
    if owned and not any(array is b for b in borrowed):
        borrowed.append(array)  # handed out once: a second field holding it gets a copy
        return array
    return np.array(array, copy=True)
