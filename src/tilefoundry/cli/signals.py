"""How a signal stops the command: Ctrl-C (SIGINT), SIGTERM and SIGHUP raise `Interrupted` in
the main thread, which unwinds the command (scratch files and worker processes are cleaned up on
the way) to `main`, which prints one line and exits with 128 + the signal's number.

Two places would lose the signal otherwise. Python cannot raise out of a gc callback (jax has
one) or a `__del__`: it reports the exception as "ignored" and carries on, so an interrupt that
lands there is delivered again once the main thread has left that code. And a signal the
command was started ignoring (`nohup`'s SIGHUP, a background job's SIGINT) stays ignored.
"""

from __future__ import annotations

import _thread
import contextlib
import gc
import signal
import sys
import threading
import time
from collections.abc import Iterator

STOPPING_SIGNALS = {
    signal.SIGINT: "interrupted",
    signal.SIGTERM: "terminated",
    **({signal.SIGHUP: "hung up"} if hasattr(signal, "SIGHUP") else {}),
}
"""The signals that stop a command, each with the line it prints."""


class Interrupted(KeyboardInterrupt):
    """A stopping signal reached the command (its handler raised this), as opposed to a
    KeyboardInterrupt that a DSL file raises itself, which is that file's error."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(STOPPING_SIGNALS.get(signum, "interrupted"))
        self.signum = signum


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[list[int]]:
    """Within: the handlers (main thread only; elsewhere nothing changes) and the re-delivery
    of swallowed interrupts. Yields the signals received, in order: one may have been swallowed
    for good, and the command must still stop."""
    received: list[int] = []

    def on_signal(signum, frame) -> None:
        received.append(signum)
        raise Interrupted(signum)

    previous = {}
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        try:
            previous[signum] = signal.signal(signum, on_signal)
        except ValueError:  # not the main thread
            break
    hook, sys.unraisablehook = sys.unraisablehook, _on_unraisable(sys.unraisablehook)
    try:
        yield received
    finally:
        sys.unraisablehook = hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _on_unraisable(hook):
    """The unraisable hook: an Interrupted is delivered again, anything else goes to `hook`."""

    def report(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)
            return
        swallowing = {report.__code__}
        swallowing.update(c.__code__ for c in gc.callbacks if hasattr(c, "__code__"))
        if hasattr(unraisable.object, "__code__"):
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
