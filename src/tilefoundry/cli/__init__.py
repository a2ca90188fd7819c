"""The `tilefoundry` command: check, show, emit, run, report and validate DSL programs.

`main` is the one error boundary. A program the compiler refuses, a missing file or bad inputs
are the user's to fix: one located message (`file:line:col: error: ...` and the source line),
exit status 1, never a traceback. Anything else escaping is our bug: a short message and exit
status 2 (set TILEFOUNDRY_TRACEBACK=1 to see the traceback when reporting it).
"""

from __future__ import annotations

import _thread
import gc
import linecache
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from tilefoundry.errors import EvalError, InternalCompilerError, VerifyError

TRACEBACK_ENV = "TILEFOUNDRY_TRACEBACK"
STOPPING_SIGNALS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
if hasattr(signal, "SIGHUP"):
    STOPPING_SIGNALS[signal.SIGHUP] = "hung up"
"""The signals that stop a command, each with the line it prints; the exit status is 128 + the
signal's number, as shells report it (130 for Ctrl-C), after the same clean-up for each."""


class Disagreement(Exception):
    """A backend's results differ from the reference oracle: a compiler bug, not a user error."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, SIGHUP) reached the command (its handler raised this), as opposed to
    a KeyboardInterrupt that a DSL file raises itself, which is that file's error. Raised, it
    unwinds the command, so scratch files and worker processes are cleaned up on the way."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(STOPPING_SIGNALS.get(signum, "interrupted"))
        self.signum = signum


_received: list[int] = []
"""The stopping signals that reached the command: a handler's exception can be swallowed where
Python cannot raise (a gc callback, a __del__), and the command must still stop."""


def _on_signal(signum, frame) -> None:
    _received.append(signum)
    raise Interrupted(signum)


def _on_unraisable(hook):
    """Python reports an exception it cannot raise (one in a gc callback, such as jax's, or in a
    __del__) and carries on. An interrupt swallowed that way is delivered again once the main
    thread has left the callback (and this hook), where it unwinds the command; anything else
    goes to the previous hook."""

    def report(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)
            return
        swallowing = {report.__code__}
        swallowing.update(c.__code__ for c in gc.callbacks if hasattr(c, "__code__"))
        if unraisable.object is not None and hasattr(unraisable.object, "__code__"):
            swallowing.add(unraisable.object.__code__)
        args = (unraisable.exc_value.signum, threading.main_thread().ident, swallowing)
        threading.Thread(target=_deliver_again, args=args, daemon=True).start()

    return report


def _deliver_again(signum: int, main_thread: int, swallowing: set) -> None:
    """Signal the main thread again as soon as none of the `swallowing` code runs there."""
    while True:
        frame = sys._current_frames().get(main_thread)
        if frame is None:
            return
        while frame is not None and frame.f_code not in swallowing:
            frame = frame.f_back
        if frame is None:
            _thread.interrupt_main(signum)
            return
        time.sleep(0.001)


def main(argv: Sequence[str] | None = None) -> int:
    """The command. Run as the process's entry (`argv` None), a stopping signal ends the process
    at once with status 128 + its number: tearing down the interpreter while XLA threads still
    run can crash."""
    previous = _install_handlers()
    hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable(sys.unraisablehook)
    try:
        status = _guarded(lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)))
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if _received and status < 128:  # swallowed twice over; the command still stops
        print(STOPPING_SIGNALS[_received[0]], file=sys.stderr)
        status = 128 + _received[0]
    _received.clear()
    if status > 128 and argv is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


def _install_handlers() -> dict[int, object]:
    """The stopping signals' handlers, installed (only the main thread can); the previous ones.
    A signal the command was started ignoring stays ignored (`nohup`, a background job)."""
    previous = {}
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except ValueError:  # not the main thread: leave the handlers alone
            break
    return previous


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


def _guarded(action) -> int:
    try:
        import numpy as np

        # Floating-point warnings (inf - inf in a summary, log of a negative input) are not the
        # command's output: NaN and inf show in the results tables and the oracle judges them.
        with np.errstate(all="ignore"):
            return action()
    except (VerifyError, EvalError) as err:
        print(visible(user_error_text(err)), file=sys.stderr)
        return 1
    except ModuleNotFoundError as err:
        if os.environ.get(TRACEBACK_ENV) or err.name not in ("jax", "jaxlib"):
            raise
        print(
            f"error: this needs {err.name}, which is not installed; "
            "pip install -e '.[xla]' adds it",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Interrupted) else signal.SIGINT
        print(STOPPING_SIGNALS[signum], file=sys.stderr)
        return 128 + signum
    except Exception as err:  # the boundary: whatever escapes is reported, not dumped
        if os.environ.get(TRACEBACK_ENV):
            raise
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


__all__ = ["Disagreement", "main"]
