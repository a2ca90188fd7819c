"""Pausing Python's cyclic garbage collector while the compiler builds IR.

Compiling allocates many small objects that live until the compile ends (nodes, types, memo
entries). Each allocation burst triggers collections that walk the whole young heap and,
periodically, every tracked object in the process (with jax imported, one full collection costs
tens of milliseconds), so collection cost grows with program size for no reclaimed memory. The
stages that build IR pause the collector and restore it afterwards; reference counting still
frees everything that is not in a cycle.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def gc_paused(fn: F) -> F:
    """`fn` run with the cyclic collector off (and put back as it was, even on an error)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper  # type: ignore[return-value]
