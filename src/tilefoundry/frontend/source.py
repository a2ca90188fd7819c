"""Programs given as text: `parse_source(text, filename)` runs a DSL module from a string.

Tools and the frontend's fuzz test hand the compiler source that is not a file on disk. The text is
registered with `linecache` under `filename`, so `inspect.getsource` (and therefore `@func`) reads
it like a file, and every way the program can fail becomes a located VerifyError: a syntax
error, or Python raising while it evaluates the module's own code (an annotation such as
`4 @ (m.a, m.b)`, an undefined name at module level). An exception raised inside tilefoundry's
own code that is not one of our errors is our bug and stays an InternalCompilerError.
"""

from __future__ import annotations

import linecache
import re
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tilefoundry.errors import InternalCompilerError, TileFoundryError, VerifyError
from tilefoundry.frontend.depth import with_python_compiler_room
from tilefoundry.gc_pause import gc_paused
from tilefoundry.ir.core import SourceSpan

PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


@gc_paused
def parse_source(
    text: str, filename: str = "<tilefoundry>", namespace: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Execute `text` as a module and return its namespace (the `@func` results among it)."""
    _check_arguments(text, filename, namespace)
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    scope: dict[str, Any] = {"__name__": "__tilefoundry_source__"}
    scope.update(namespace or {})
    try:
        code = with_python_compiler_room(
            lambda: compile(text, filename, "exec", dont_inherit=True),
            text,
            SourceSpan(filename, 1, 1),
        )
    except SyntaxError as err:
        raise VerifyError(
            f"Module {Path(filename).name}: invalid syntax: {err.msg}",
            location=SourceSpan(filename, err.lineno or 1, err.offset or 1),
        ) from None
    try:
        exec(code, scope)
    except VerifyError as err:
        if err.location is not None:
            raise
        raise err.with_location(_program_line(err, filename)) from None
    except TileFoundryError:
        raise
    except Exception as err:
        raise _classify(err, filename) from None
    except KeyboardInterrupt:
        raise  # Ctrl-C, or the program's own: only the caller can tell (the CLI does)
    except BaseException as err:  # SystemExit (sys.exit), a bare BaseException subclass
        raise program_exit_error(err, filename) from None
    return scope


def _check_arguments(text: object, filename: object, namespace: object) -> None:
    """A wrong argument is the caller's error, named, not an AttributeError from inside."""
    for name, value in (("text", text), ("filename", filename)):
        if isinstance(value, bytes):
            raise VerifyError(f"parse_source: {name} must be a str, got bytes; decode it first")
        if not isinstance(value, str):
            raise VerifyError(f"parse_source: {name} must be a str, got {type(value).__name__}")
    if namespace is not None and not isinstance(namespace, Mapping):
        raise VerifyError(
            "parse_source: namespace must be a mapping of names to values (or None), got "
            f"{type(namespace).__name__}"
        )


def program_exit_error(err: BaseException, filename: str) -> VerifyError:
    """The program's own error for a BaseException its top level raised: a DSL file is executed
    to define its functions, so `sys.exit()` there must not end (or decide the verdict of) the
    command that reads it."""
    if isinstance(err, SystemExit):
        what = f"called sys.exit({err.code!r})"
    else:
        what = f"raised {type(err).__name__}" + (f": {err}" if str(err) else "")
    return VerifyError(
        f"Module {Path(filename).name}: the program {what} while it was being loaded; a DSL "
        "file runs to define its functions and must not exit or interrupt itself, so remove it",
        location=_program_line(err, filename) or SourceSpan(filename, 1, 1),
    )


def _program_line(err: Exception, filename: str) -> SourceSpan | None:
    """The innermost line of the program that was running when `err` was raised."""
    inside = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == filename]
    if not inside:
        return None
    frame = inside[-1]
    return SourceSpan(filename, frame.lineno or 1, (frame.colno or 0) + 1)


_TUPLE_SPLIT = re.compile(r"unsupported operand type\(s\) for @: '\w+' and 'tuple'")
"""The TypeError of DESIGN §3's `N @ (m.a, m.b)` spelling, which Python refuses before any of
our code runs (see `tilefoundry.ir.types.shard.sugar`); `N @ (m.a * m.b)` is the spelling."""


def _classify(err: Exception, filename: str) -> TileFoundryError:
    frames = traceback.extract_tb(err.__traceback__)
    last = frames[-1] if frames else None
    if last is not None and last.filename.startswith(PACKAGE_DIR):
        return InternalCompilerError(
            f"frontend: internal error ({type(err).__name__}: {err}) at "
            f"{last.filename}:{last.lineno}"
        )
    if isinstance(err, TypeError) and _TUPLE_SPLIT.search(str(err)):
        return VerifyError(
            f"Module {Path(filename).name}: `N @ (m.a, m.b)` cannot split a dimension over a "
            "tuple of mesh axes in an annotation (Python evaluates `N @ tuple` itself and "
            f"raises TypeError: {err}); group the axes with `*`: `N @ (m.a * m.b)`",
            location=_program_line(err, filename) or SourceSpan(filename, 1, 1),
        )
    return VerifyError(
        f"Module {Path(filename).name}: evaluating the program raised {type(err).__name__}: "
        f"{err}; fix the expression on this line",
        location=_program_line(err, filename) or SourceSpan(filename, 1, 1),
    )
