"""Building a typed op Call from a surface name: `tf.<name>(*inputs, **attrs)` (DESIGN §3).

One builder serves the `tf` namespace called on IR values directly and the frontend parsing a
function body, so "what `tf.softmax(x, axis=-1)` means" has one definition. Positional arguments
fill the op's ParamDefs in schema order (inputs and attributes alike, so `tf.reshape(x, shape)`
reads naturally); keywords name attributes. Compile-time scalars passed as inputs become rank-0
umat Constants, a Python float taking the float dtype of the tensor operands (parser §1.9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Metadata, Tuple
from tilefoundry.ir.types import DType, StorageKind, TensorType, f32
from tilefoundry.ir.types.shard import LayoutBase, ShardLayout
from tilefoundry.ir.types.shard.sugar import layout_from_sugar
from tilefoundry.rules import SurfaceEntry

SCALARS = (bool, int, float, np.generic, np.ndarray)
"""Compile-time values that become Constants when they meet a tensor operand."""


def float_dtype_of(name: str, operands: Sequence[Any]) -> DType:
    """The float dtype a Python float adopts: the one float dtype among the tensor operands,
    f32 when there is none; two different float dtypes make the literal ambiguous."""
    found = []
    for value in operands:
        type_ = getattr(value, "type", None) if isinstance(value, Expr) else None
        if isinstance(type_, TensorType) and type_.dtype.is_float and type_.dtype not in found:
            found.append(type_.dtype)
    if len(found) > 1:
        names = " and ".join(d.name for d in found)
        raise VerifyError(
            f"{name}: a Python float meets operands of {names}, so its dtype is ambiguous; "
            "cast the operands to one dtype first"
        )
    return found[0] if found else f32


def _has_float(value: Any) -> bool:
    if isinstance(value, tuple):
        return any(map(_has_float, value))
    return isinstance(value, float)


def constant(value: Any, float_dtype: DType, metadata: tuple[Metadata, ...] = ()) -> Constant:
    """A rank-0 umat literal; a Python float is built directly in `float_dtype`."""
    if isinstance(value, float):
        return Constant(value, TensorType((), float_dtype, storage=StorageKind.UMAT), metadata)
    return Constant(value, metadata=metadata)


def _attribute_value(param: Any, value: Any) -> Any:
    """Attribute sugar driven by the ParamDef annotation: layout sugar, dtype names."""
    if param.annotation is LayoutBase and isinstance(value, tuple):
        _, layout = layout_from_sugar(value)
        if not isinstance(layout, ShardLayout):
            raise VerifyError(
                f"attribute '{param.name}': {value!r} names no mesh axis; write N @ m.a for a "
                'split or {m.a @ P("sum")} for a value state, or Layout(shape) for a value on '
                "no mesh"
            )
        return layout
    if param.annotation is DType and isinstance(value, str):
        return DType.from_name(value)
    return value


def bind_surface_arguments(
    entry: SurfaceEntry, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """Map arguments onto the op's ParamDefs: ([(input name, value)], {attribute: value})."""
    name = f"tf.{entry.name}"
    if entry.rewrite is not None:
        try:
            args, kwargs = entry.rewrite(*args, **kwargs)
        except TypeError as err:  # the spelling's own signature refused the arguments
            raise VerifyError(f"{name}: {err}") from None
        except VerifyError as err:
            raise VerifyError(f"{name}: {err.message}") from None
    params = [p for p in entry.op_class.param_defs() if p.name not in entry.fixed]
    if len(args) > len(params):
        spelled = ", ".join(p.name for p in params)
        raise VerifyError(
            f"{name}: takes at most {len(params)} argument(s) ({spelled}), got {len(args)}"
        )
    given: dict[str, Any] = {}
    for param, value in zip(params, args, strict=False):
        given[param.name] = value
    by_name = {p.name: p for p in params}
    for key, value in kwargs.items():
        if key not in by_name:
            spelled = ", ".join(by_name) or "none"
            raise VerifyError(f"{name}: unknown argument '{key}'; arguments: {spelled}")
        if key in given:
            raise VerifyError(f"{name}: argument '{key}' is given twice")
        given[key] = value
    inputs: list[tuple[str, Any]] = []
    attrs: dict[str, Any] = {}
    for param in params:
        if param.kind == "input":
            if param.name not in given:
                raise VerifyError(f"{name}: missing input '{param.name}'")
            inputs.append((param.name, given[param.name]))
        elif param.name in given:
            try:
                attrs[param.name] = _attribute_value(param, given[param.name])
            except VerifyError as err:
                raise VerifyError(f"{name}: {err.message}") from None
    return inputs, attrs


def input_expr(name: str, role: str, value: Any, float_dtype: DType) -> Expr:
    """An op input: an IR value, a compile-time scalar (a Constant), or a tuple of values."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, SCALARS):
        return constant(value, float_dtype)
    if isinstance(value, tuple) and value:
        return Tuple(tuple(input_expr(name, role, v, float_dtype) for v in value))
    raise VerifyError(f"{name}: input '{role}' must be a tensor value or a number, got {value!r}")


def build_surface_call(
    entry: SurfaceEntry,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    ctx: TypeInferContext,
    metadata: tuple[Metadata, ...] = (),
) -> Call:
    """The typed Call `tf.<entry.name>(*args, **kwargs)` builds."""
    name = f"tf.{entry.name}"
    inputs, attrs = bind_surface_arguments(entry, args, kwargs)
    values = [v for _, v in inputs]
    float_dtype = float_dtype_of(name, values) if any(map(_has_float, values)) else f32
    exprs = tuple(input_expr(name, role, v, float_dtype) for role, v in inputs)
    op = entry.op_class(**entry.fixed, **attrs)
    call = Call(op, exprs, metadata=metadata)
    ctx.infer(call)
    return call


class SurfaceOp:
    """`tf.<name>`: callable on IR values (outside a function body it types a fresh Call)."""

    def __init__(self, entry: SurfaceEntry):
        self.entry = entry

    def __call__(self, *args: Any, **kwargs: Any) -> Call:
        return build_surface_call(self.entry, args, kwargs, ctx=TypeInferContext())

    def __repr__(self) -> str:
        return f"tf.{self.entry.name}"
