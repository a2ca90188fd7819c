"""The user-facing error classes.

Every refusal of a program or a type object is a `VerifyError` whose message names the op (or the
type object), what is wrong and, where one exists, the remedy. When the offending expression came
from Python source the message ends with its location, so a user can jump to the line.
Internal breakage (a pass producing ill-formed IR) is a different class on purpose: it is our bug,
not the user's, and it prints the IR around the bad node.
"""

from __future__ import annotations

from typing import Protocol


class Located(Protocol):
    """Anything that knows where in the user's source it came from."""

    file: str
    line: int
    col: int


def format_location(location: Located | None) -> str:
    if location is None:
        return ""
    return f"{location.file}:{location.line}:{location.col}"


class TileFoundryError(Exception):
    """Base of every error this package raises on purpose."""


class VerifyError(TileFoundryError, ValueError):
    """An ill-typed program or an invalid type object.

    `message` is the bare diagnostic (`"<OpClass>: <what is wrong>"`); `location`, when known, is
    appended as `at file:line:col` so the text alone is enough to find the line.
    """

    def __init__(self, message: str, *, location: Located | None = None):
        self.message = message
        self.location = location
        where = format_location(location)
        super().__init__(f"{message}\n  at {where}" if where else message)

    def with_location(self, location: Located | None) -> VerifyError:
        """The same error, located; an error that already has a location keeps it."""
        if self.location is not None or location is None:
            return self
        return type(self)(self.message, location=location)


class UnsupportedError(VerifyError):
    """A well-typed program that a particular exit cannot express (it fails closed)."""


class EvalError(TileFoundryError, ValueError):
    """Bad inputs at evaluation time: wrong count, shape or dtype, unbound DimVar, no variant."""


class InternalCompilerError(TileFoundryError, RuntimeError):
    """A pass broke the IR. This is a compiler bug; the message carries the IR around the node."""
