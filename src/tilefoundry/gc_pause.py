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
            _tenure_survivors()
            gc.enable()

    return wrapper  # type: ignore[return-value]


def _tenure_survivors() -> None:
    """Move what the paused stage left alive into the oldest generation, unexamined.

    Allocations made while the collector is off still count towards a young collection, so the
    first allocation after `gc.enable()` would trace every node the stage built (and soon after a
    middle and a full collection, with jax's heap). The IR is acyclic and lives as long as the
    caller holds it; reference counting frees it. `freeze()` then `unfreeze()` splices every
    generation into the oldest one in constant time and resets the young count: the collector
    resumes as if the stage had allocated nothing, and a cycle among the moved objects is still
    found by the next full collection. Skipped when the process has frozen objects of its own
    (a pre-fork `gc.freeze()`), which `unfreeze()` would release."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
