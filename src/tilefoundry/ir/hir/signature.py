"""Signature matching shared by elaboration, return checks and the Function verifier.

One matcher serves both directions (an argument against a parameter, a body type against a
declared return type) so that "what a declaration admits" has one definition: a TensorType whose
layout is None is a template wildcard (shape and dtype must match, the rest is taken from the
actual type), any declared layout is an exact contract, and a DimVar extent admits any int inside
its half-open envelope or the same DimVar — never a different one (hir §1.1 binding rules).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Var
from tilefoundry.ir.types import (
    DimVar,
    DType,
    ShapeDim,
    TensorType,
    TupleType,
    Type,
    dim_vars,
    format_dim,
    resolve_dim,
    tensor_fields,
)


def _shape_text(shape: tuple[ShapeDim, ...]) -> str:
    return "(" + ", ".join(format_dim(d) for d in shape) + ")"


def shape_mismatch(declared: tuple[ShapeDim, ...], actual: tuple[ShapeDim, ...]) -> str | None:
    """Why `actual` does not fit `declared` (envelope matching on DimVar axes), or None."""
    if len(declared) != len(actual):
        return (
            f"rank {len(actual)} shape {_shape_text(actual)} does not match "
            f"rank {len(declared)} shape {_shape_text(declared)}"
        )
    for axis, (want, got) in enumerate(zip(declared, actual, strict=True)):
        if want == got:
            continue
        if isinstance(want, DimVar) and isinstance(got, int):
            if want.lo <= got < want.hi:
                continue
            return (
                f"axis {axis} extent {got} lies outside the envelope [{want.lo}, {want.hi}) "
                f"of DimVar {want.name}"
            )
        return f"axis {axis} is {format_dim(got)}, expected {format_dim(want)}"
    return None


def type_mismatch(declared: Type, actual: Type) -> str | None:
    """Why a value of type `actual` is not admitted where `declared` is written, or None."""
    if isinstance(declared, TensorType):
        if not isinstance(actual, TensorType):
            return f"expected a tensor {declared}, got {actual}"
        reason = shape_mismatch(declared.shape, actual.shape)
        if reason is not None:
            return reason
        if declared.dtype != actual.dtype:
            return f"dtype {actual.dtype} does not match the declared {declared.dtype}"
        if declared.layout is None:
            return None
        if declared.layout != actual.layout:
            return (
                f"layout {actual.layout} does not match the declared {declared.layout}; a declared "
                "layout is an exact contract (reshard the value to it)"
            )
        if declared.storage != actual.storage:
            return f"storage {actual.storage} does not match the declared {declared.storage}"
        return None
    if isinstance(declared, TupleType) and isinstance(actual, TupleType):
        if len(declared.fields) != len(actual.fields):
            return f"{len(actual.fields)} tuple fields, expected {len(declared.fields)}"
        for i, (want, got) in enumerate(zip(declared.fields, actual.fields, strict=True)):
            reason = type_mismatch(want, got)
            if reason is not None:
                return f"tuple field {i}: {reason}"
        return None
    return None if declared == actual else f"expected {declared}, got {actual}"


def bound_type(declared: Type, actual: Type) -> Type:
    """The type a parameter takes when `actual` (already admitted) binds to it.

    A wildcard takes the argument's dtype, layout (ShardLayout with its Partial states included)
    and storage, but keeps the declared shape: elaboration never monomorphizes a DimVar.
    """
    if isinstance(declared, TensorType) and declared.layout is None:
        return TensorType(declared.shape, actual.dtype, actual.layout, actual.storage)
    return declared


def bind_arguments(fn_name: str, params: tuple[Var, ...], arg_types: tuple[Type, ...]) -> tuple:
    """Bind each argument type to its parameter (hir §1.1); errors name the parameter."""
    if len(arg_types) != len(params):
        names = ", ".join(p.name for p in params)
        raise VerifyError(
            f"Function {fn_name}: expected {len(params)} argument(s) ({names}), "
            f"got {len(arg_types)}"
        )
    bound = []
    for param, actual in zip(params, arg_types, strict=True):
        reason = type_mismatch(param.type, actual)
        if reason is not None:
            raise VerifyError(f"Function {fn_name}: parameter '{param.name}': {reason}")
        bound.append(bound_type(param.type, actual))
    return tuple(bound)


def signature_dim_vars(types: Iterable[tuple[str, Type]]) -> dict[str, tuple[DimVar, str]]:
    """The DimVars named by the shapes of `(where, type)` pairs, first occurrence per name,
    refusing a name that appears with two different envelopes (hir §1.1 typing rules)."""
    found: dict[str, tuple[DimVar, str]] = {}
    for where, type_ in types:
        for leaf in tensor_fields(type_) if isinstance(type_, TensorType | TupleType) else ():
            for dim in leaf.shape:
                for var in dim_vars(dim):
                    first = found.setdefault(var.name, (var, where))
                    if first[0] is not var:
                        raise VerifyError(
                            f"DimVar {var.name} has envelope [{first[0].lo}, {first[0].hi}) in "
                            f"{first[1]} but [{var.lo}, {var.hi}) in {where}; every occurrence "
                            "of one name in a signature must agree"
                        )
    return found


Bindings = dict[DimVar, int]


def bind_dim_vars(fn_name: str, params: Sequence[Var], shapes: Sequence[Any]) -> Bindings:
    """DimVar -> extent read off concrete argument shapes (ranks, static extents, envelopes and
    derived extents checked), for every engine that runs a function on arrays: the evaluator
    and the exits. A mismatch is the caller's bad input, hence EvalError."""
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


def numpy_carrier(dtype: DType, where: str) -> np.dtype:
    """The numpy dtype that carries `dtype` (every DType has one); exits with a narrower dtype
    table pass their own `carrier` to `check_arguments` instead."""
    return np.dtype(dtype.to_numpy())


def check_arguments(
    fn_name: str,
    params: Sequence[Var],
    arrays: Sequence[Any],
    caller: str,
    carrier: Callable[[DType, str], np.dtype] = numpy_carrier,
) -> tuple[tuple[np.ndarray, ...], Bindings]:
    """The one input check of every engine that runs a function on arrays (the evaluator and
    every exit): the count, each argument's dtype exactly the parameter's (never a silent
    conversion or a reinterpretation of its bits), then ranks, extents and DimVars
    (`bind_dim_vars`). Returns the arguments as ndarrays and the DimVar bindings; each refusal is
    an EvalError naming the parameter and the fix."""
    _check_count(fn_name, params, arrays, caller)
    checked = []
    for param, array in zip(params, arrays, strict=True):
        where = f"Function {fn_name}: parameter '{param.name}'"
        expected = _expected_dtype(param, where, caller, carrier)
        try:
            value = np.asarray(array)
        except (TypeError, ValueError) as err:
            raise EvalError(
                f"{where}: the argument is not an array ({err}); pass a numpy array of dtype "
                f"{expected}"
            ) from None
        _check_dtype(param, where, value.dtype, expected)
        checked.append(value)
    bindings = bind_dim_vars(fn_name, params, [a.shape for a in checked])
    return tuple(checked), bindings


def check_array_signature(
    fn_name: str, params: Sequence[Var], arrays: Sequence[Any], caller: str
) -> Bindings:
    """`check_arguments` for arrays that must not be read or converted (device arrays: reading
    one copies it to the host): the same checks from each argument's `shape` and `dtype`."""
    _check_count(fn_name, params, arrays, caller)
    for param, array in zip(params, arrays, strict=True):
        where = f"Function {fn_name}: parameter '{param.name}'"
        expected = _expected_dtype(param, where, caller, numpy_carrier)
        if not hasattr(array, "shape") or not hasattr(array, "dtype"):
            raise EvalError(
                f"{where}: the argument is a {type(array).__name__}, not an array; pass a jax "
                f"or numpy array of dtype {expected}"
            )
        _check_dtype(param, where, np.dtype(array.dtype), expected)
    return bind_dim_vars(fn_name, params, [tuple(a.shape) for a in arrays])


def _check_count(fn_name: str, params: Sequence[Var], arrays: Sequence[Any], caller: str) -> None:
    if len(arrays) != len(params):
        names = ", ".join(p.name for p in params)
        raise EvalError(
            f"{caller}: Function {fn_name}: expected {len(params)} argument(s) ({names}), "
            f"got {len(arrays)}; pass one array per parameter"
        )


def _expected_dtype(
    param: Var, where: str, caller: str, carrier: Callable[[DType, str], np.dtype]
) -> np.dtype:
    if not isinstance(param.type, TensorType):
        raise UnsupportedError(f"{caller}: {where} is {param.type}; it takes tensor parameters")
    return carrier(param.type.dtype, where)


def _check_dtype(param: Var, where: str, got: np.dtype, expected: np.dtype) -> None:
    if got != expected:
        # raw bytes of the same width are how np.save stores an ml_dtypes array
        raw = got.kind == "V" == expected.kind
        fix = "view" if raw and got.itemsize == expected.itemsize else "astype"
        raise EvalError(
            f"{where} is {param.type.dtype.name} ({expected}), got an array of dtype "
            f"{got}; convert it with .{fix}({expected.name!r}) first"
        )
