"""Non-semantic facts attached to an Expr: where it came from and what the author called it.

Metadata never changes what a program means, so it is excluded from equality, hashing and the
canonical printer; it exists so diagnostics can point at the user's line (`at file:line:col`) and
so printed IR can reuse the author's names. An Expr holds at most one entry per metadata class,
which lets every lookup be a plain "the SourceSpan of this node" without ranking rules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tilefoundry.errors import VerifyError

if TYPE_CHECKING:
    from tilefoundry.ir.core.expr import Expr


class Metadata:
    """Base of every metadata kind; the class is the key (one entry per class per Expr)."""


@dataclass(frozen=True)
class SourceSpan(Metadata):
    """A location in the user's Python source; `VerifyError(location=...)` reads file/line/col."""

    file: str
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None


@dataclass(frozen=True)
class BindingName(Metadata):
    """The name the author bound the value to (`c = a + b` gives `c`), for readable IR."""

    name: str


M = TypeVar("M", bound=Metadata)


def normalize_metadata(entries: Iterable[Metadata]) -> tuple[Metadata, ...]:
    """Check the one-entry-per-class rule and freeze the entries into a tuple."""
    entries = tuple(entries)
    seen: set[type] = set()
    for entry in entries:
        if not isinstance(entry, Metadata):
            raise VerifyError(f"Expr: metadata entries must be Metadata, got {entry!r}")
        if type(entry) in seen:
            raise VerifyError(f"Expr: metadata holds two {type(entry).__name__} entries")
        seen.add(type(entry))
    return entries


def get_metadata(expr: Expr, kind: type[M]) -> M | None:
    """The entry of class `kind` on `expr`, or None."""
    for entry in expr.metadata:
        if type(entry) is kind:
            return entry
    return None


def source_span(expr: Expr | None) -> SourceSpan | None:
    """Where `expr` came from in the user's source, if it came from source at all."""
    return None if expr is None else get_metadata(expr, SourceSpan)


def binding_name(expr: Expr) -> str | None:
    """The author's name for `expr`, if it was bound to one."""
    entry = get_metadata(expr, BindingName)
    return None if entry is None else entry.name


def with_metadata(expr: Expr, *entries: Metadata) -> Expr:
    """A copy of `expr` whose metadata has `entries` added, each replacing its class's old entry.

    A copy is a new node (Exprs are identities), so callers attach metadata while building a node,
    before anything else refers to it.
    """
    replaced = {type(e) for e in entries}
    kept = tuple(e for e in expr.metadata if type(e) not in replaced)
    return dataclasses.replace(expr, metadata=kept + tuple(entries))
