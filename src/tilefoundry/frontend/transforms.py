"""Function transforms a DSL body may call: `value_and_grad(loss, argnums=(1, 2))(x, a, b)`.

A transform (`tilefoundry.grad`, ...) takes a Function and compile-time values and returns a
Function, so in a body it runs while the body is parsed, and the Function it returns is then
called like any @func. The transforms register here (they live above the frontend, which must not
import them), so the frontend recognises one without knowing what it does.

A transform's result is derived from its input for the input's parameter types; called with other
argument types (a split activation for a parameter annotated plain), it is derived again at that
call site from the input elaborated for those types (`at_call_site`), so a gradient is always the
gradient of the program that call runs, typed as that call's parameters are.
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


_REDERIVE = "_tilefoundry_rederive"


def derived(result: Any, rederive: Callable[[tuple], Any]) -> Any:
    """Record how to derive `result` again for other argument types: `rederive(arg_types)`."""
    object.__setattr__(result, _REDERIVE, rederive)
    return result


def at_call_site(callee: Any, arg_types: tuple) -> Any:
    """The Function a call with `arg_types` targets: a transform's result derived again when the
    types are not its parameters' own, else `callee` itself."""
    rederive = getattr(callee, _REDERIVE, None)
    if rederive is None or arg_types == tuple(p.type for p in callee.params):
        return callee
    return rederive(arg_types)


def is_function_transform(value: Any) -> bool:
    try:
        return value in _TRANSFORMS
    except TypeError:  # an unhashable compile-time value
        return False
