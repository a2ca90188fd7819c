"""Room for CPython's own parser and compiler on deeply nested expressions.

CPython's parser and compiler recurse (in C) on expression nesting and count that against the
recursion limit, so one expression of 5,000 chained adds is a RecursionError in `compile` and
`ast.parse` at the default limit of 1,000, before any of our code runs. They get a higher
limit for the duration of the call; our own walks over the program are iterative and need none.
Nesting beyond even that is the user's to split, reported as a located VerifyError.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import SourceSpan

PYTHON_COMPILER_RECURSION = 30_000
"""Enough for an expression nested ~10,000 deep (CPython's compiler scales the limit by 3), and
far below what would exhaust the C stack of the main thread."""

T = TypeVar("T")


def with_python_compiler_room(action: Callable[[], T], where: SourceSpan) -> T:
    """`action()` (a `compile` or `ast.parse`) under the higher recursion limit."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, PYTHON_COMPILER_RECURSION))
    try:
        return action()
    except RecursionError:
        raise VerifyError(
            f"{where.file}: an expression is nested too deeply for Python's compiler; split "
            "it into statements (e.g. assign partial sums to names)",
            location=where,
        ) from None
    finally:
        sys.setrecursionlimit(previous)
