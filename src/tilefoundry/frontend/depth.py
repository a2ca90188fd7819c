"""Room for CPython's own parser and compiler on deeply nested expressions.

CPython's compiler (and `ast.parse`) recurse in C on expression nesting and count that against
the recursion limit, so one expression of 5,000 chained adds is a RecursionError at the default
limit of 1,000, before any of our code runs. Raising the limit in the caller's thread is unsafe:
the C stack behind it is whatever that thread has (8 MiB for the main thread by default, which
60,000 chained adds overflow: a segfault), and the limit is process-wide, so concurrent parses
would restore each other's values. So a source that fails at the caller's limit is compiled
again in a helper thread with a stack of known size, under a limit that stack holds, one such
retry at a time (the limit is put back before the next may begin). Our own walks over the
program are iterative and need none of this. Nesting beyond even that, or beyond the parser's
fixed stack (a deep unary minus or power chain, which CPython reports as MemoryError), is the
user's to split, reported as a located VerifyError.
"""

from __future__ import annotations

import io
import sys
import threading
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import SourceSpan

PYTHON_COMPILER_RECURSION = 30_000
"""The limit for the retry. CPython's compiler allows 3 nesting levels per unit, so 90,000
levels, at about 150 bytes of C stack each on CPython 3.11 (measured: 57,000 chained adds fill
the main thread's 8 MiB): about 13 MiB, well inside `COMPILER_STACK_BYTES`."""

COMPILER_STACK_BYTES = 64 * 2**20
"""The helper thread's stack (virtual memory: only the pages a deep parse touches are used)."""

_RETRY = threading.Lock()

T = TypeVar("T")


def with_python_compiler_room(action: Callable[[], T], text: str, where: SourceSpan) -> T:
    """`action()` (a `compile` or `ast.parse` of `text`, which starts at `where`), retried with
    more room when it needs it."""
    try:
        return action()
    except RecursionError:
        pass
    except MemoryError:
        raise _too_deep(text, where) from None
    with _RETRY:
        return _in_roomy_thread(action, text, where)


def _in_roomy_thread(action: Callable[[], T], text: str, where: SourceSpan) -> T:
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as err:  # handed to the caller's thread
            outcome["error"] = err

    previous_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous_limit, PYTHON_COMPILER_RECURSION))
    try:
        previous_stack = threading.stack_size(COMPILER_STACK_BYTES)
        try:
            helper = threading.Thread(target=run, name="tilefoundry-compile", daemon=True)
            helper.start()
        finally:
            threading.stack_size(previous_stack)
        helper.join()
    finally:
        sys.setrecursionlimit(previous_limit)
    error = outcome.get("error")
    if isinstance(error, RecursionError | MemoryError):
        raise _too_deep(text, where) from None
    if error is not None:
        raise error
    return outcome["value"]  # type: ignore[return-value]


def _too_deep(text: str, where: SourceSpan) -> VerifyError:
    return VerifyError(
        f"Module {Path(where.file).name}: an expression is nested too deeply for Python's "
        "parser or compiler; split it into statements (e.g. assign partial sums to names)",
        location=_longest_statement(text, where),
    )


def _longest_statement(text: str, where: SourceSpan) -> SourceSpan:
    """Where the statement of the most tokens starts: the one CPython could not nest (neither
    names the culprit). Tokenizing does not recurse; a text it refuses keeps `where`."""
    most, found = 0, None
    count, start = 0, None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                if count > most:
                    most, found = count, start
                count, start = 0, None
            elif token.type not in _LAYOUT_TOKENS:
                count += 1
                start = start or token.start
    except (tokenize.TokenError, SyntaxError):
        return where
    if found is None:
        return where
    line, col = found
    return SourceSpan(where.file, where.line + line - 1, where.col + col)


_LAYOUT_TOKENS = (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)
