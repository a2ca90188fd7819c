"""Function transforms a DSL body may call: `value_and_grad(loss, argnums=(1, 2))(x, a, b)`.

A transform (`tilefoundry.grad`, ...) takes a Function and compile-time values and returns a
Function, so in a body it runs while the body is parsed, and the Function it returns is then
called like any @func. The transforms register here (they live above the frontend, which must not
import them), so the frontend recognises one without knowing what it does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_TRANSFORMS: set[Callable[..., Any]] = set()


def function_transform(transform: F) -> F:
    """Decorator: mark `transform` (Function, compile-time values -> Function) as callable from a
    DSL body at parse time."""
    _TRANSFORMS.add(transform)
    return transform


def is_function_transform(value: Any) -> bool:
    try:
        return value in _TRANSFORMS
    except TypeError:  # an unhashable compile-time value
        return False
