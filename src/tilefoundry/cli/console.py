"""Where output goes: results to stdout, progress to stderr (so `emit` and `show` stay pipeable),
both through rich, sized for a terminal or a fixed width for logs and tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

from tilefoundry.cli import visible

LOG_WIDTH = 120


def stdout_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else LOG_WIDTH, highlight=False)


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on stderr while long work runs; silent when stderr is not a terminal."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def plain(text: object) -> str:
    """User text (a path, a name) as printed through rich: markup brackets escaped so that
    `[bold]` in a file name prints as written, control characters (an ANSI escape in a path)
    shown as escapes instead of reaching the terminal raw."""
    return escape(visible(str(text)))
