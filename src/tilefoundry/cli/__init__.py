"""The `tilefoundry` command: check, show, emit, run, report and validate DSL programs.

`main` is the one error boundary. A program the compiler refuses, a missing file or bad inputs
are the user's to fix: one located message (`file:line:col: error: ...` and the source line),
exit status 1, never a traceback. Anything else escaping is our bug: a short message and exit
status 2 (set TILEFOUNDRY_TRACEBACK=1 to see the traceback when reporting it).
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
from collections.abc import Sequence

from tilefoundry.cli.signals import STOPPING_SIGNALS, Interrupted, stopping_on_signals
from tilefoundry.errors import EvalError, InternalCompilerError, VerifyError

TRACEBACK_ENV = "TILEFOUNDRY_TRACEBACK"


class Disagreement(Exception):
    """A backend's results differ from the reference oracle: a compiler bug, not a user error."""


def main(argv: Sequence[str] | None = None) -> int:
    """The command. Run as the process's entry (`argv` None), a stopping signal ends the process
    at once with status 128 + its number (130 for Ctrl-C): tearing down the interpreter while
    XLA threads still run can crash."""
    with stopping_on_signals() as received:
        args = list(sys.argv[1:] if argv is None else argv)
        status = _guarded(lambda: _dispatch(args), received)
        if received and status < 128:  # the interrupt was swallowed for good
            status = _stopped(received[0])
    if status > 128 and argv is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def visible(text: str) -> str:
    """`text` with control characters other than newline and tab spelled as escapes: a path
    holding an ANSI escape must not drive the user's terminal."""
    return "".join(c if c.isprintable() or c in "\n\t" else repr(c)[1:-1] for c in text)


def _dispatch(args_list: list[str]) -> int:
    from tilefoundry.cli.parser import build_parser

    if args_list[:1] == ["validate"]:
        # The validator owns its flags (and its --help); pass them through untouched.
        from tilefoundry.evaluator.validate import main as validate_main

        try:
            return validate_main(args_list[1:])
        except SystemExit as done:
            # argparse exits 2 on a usage mistake; here usage mistakes are 1 (2 is our bugs)
            return 1 if done.code == 2 else done.code or 0
    args = build_parser().parse_args(args_list)
    return args.handler(args)


def _guarded(action, received: Sequence[int] = ()) -> int:
    try:
        import numpy as np

        # Floating-point warnings (inf - inf in a summary, log of a negative input) are not the
        # command's output: NaN and inf show in the results tables and the oracle judges them.
        with np.errstate(all="ignore"):
            return action()
    except KeyboardInterrupt as err:
        return _stopped(err.signum if isinstance(err, Interrupted) else signal.SIGINT)
    except Exception as err:  # the boundary: whatever escapes is reported, not dumped
        if received:  # a signal's doing, surfaced as another error (numpy's import makes an
            return _stopped(received[0])  # interrupt inside it an ImportError)
        return _report(err)


def _stopped(signum: int) -> int:
    print(STOPPING_SIGNALS[signum], file=sys.stderr)
    return 128 + signum


def _report(err: Exception) -> int:
    if isinstance(err, VerifyError | EvalError):
        print(visible(user_error_text(err)), file=sys.stderr)
        return 1
    if isinstance(err, ModuleNotFoundError) and err.name in ("jax", "jaxlib"):
        if os.environ.get(TRACEBACK_ENV):
            raise err
        print(
            f"error: this needs {err.name}, which is not installed; "
            "pip install -e '.[xla]' adds it",
            file=sys.stderr,
        )
        return 1
    if os.environ.get(TRACEBACK_ENV):
        raise err
    print(visible(internal_error_text(err)), file=sys.stderr)
    return 2


def user_error_text(err: VerifyError | EvalError) -> str:
    """`file:line:col: error: message`, then the source line with a caret under the column."""
    message = getattr(err, "message", None) or str(err)
    location = getattr(err, "location", None)
    if location is None:
        return f"error: {message}"
    head = f"{location.file}:{location.line}:{location.col}: error: {message}"
    source = _source_line(location.file, location.line)
    if not source:
        return head
    caret = " " * (max(location.col, 1) - 1) + "^"
    return f"{head}\n  {source}\n  {caret}"


def _source_line(file: str, line: int) -> str:
    """The line to quote, read only from a program already loaded or a small regular file (an
    error about a FIFO or /dev/zero given as FILE must not read it)."""
    if file not in linecache.cache:
        try:
            if not os.path.isfile(file) or os.path.getsize(file) > 64 * 2**20:
                return ""
        except OSError:
            return ""
    return linecache.getline(file, line).rstrip("\n")


def internal_error_text(err: Exception) -> str:
    if isinstance(err, Disagreement):
        return f"internal error: {err}"
    first = str(err).splitlines()[0] if str(err) else ""
    kind = "internal compiler error" if isinstance(err, InternalCompilerError) else "internal error"
    return (
        f"{kind}: {type(err).__name__}: {first}\n"
        f"This is a tilefoundry bug; rerun with {TRACEBACK_ENV}=1 to include the traceback "
        "in a report."
    )


__all__ = ["Disagreement", "Interrupted", "main"]
