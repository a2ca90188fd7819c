"""`tile(extent, step)` and its loop variable: the two names a `for ... in tile(...)` loop is
written with (parser §1.7).

They live apart from the builders that read them (expressions, subscripts, windows, loops), so
that each builder imports them and none imports another builder back.
"""

from __future__ import annotations

from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Expr


def tile(extent: Any, step: Any) -> None:
    """`for i in tile(extent, step):` — a loop over windows `[i, i + step)` (parser §1.7).

    Only meaningful as the iterable of a for loop in a `@func` body, which the frontend reads
    from the source; calling it anywhere else is a mistake.
    """
    raise VerifyError("tile(extent, step) is only valid as the iterable of a for loop in a @func")


class TileWindow:
    """The loop variable of `for i in tile(extent, step)`: the window `[i, i + step)`.

    It is a parser-only object (parser §1.7): a subscript reads the whole window, anywhere else
    `i` means the window start (the induction variable).
    """

    def __init__(self, start: Expr, size: Any):
        self.start = start
        self.size = size
