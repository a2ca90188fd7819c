"""The DSL surface names of ops: `tf.matmul`, `tf.add`, `tf.reduce`, ... (DESIGN §3).

Each op module declares its own surface spellings next to the op, so the frontend can build the
`tf` namespace without importing any op module, and a coverage test can check that every op is
reachable from the DSL. A surface entry may fix attributes: `add` is `Binary(kind=ADD)`; and it
may take the arguments in a spelling users already know that is not the op's schema order
(`tf.arange(stop)` / `tf.arange(start, stop, step)` is an `Iota`): its `rewrite` maps them to the
schema's arguments.

The same entries name ops in printed IR (`surface_of`), so an op is spelled one way in the DSL
and in the printer: `broadcast_to`, `rms_norm`, and `add` for `Binary(kind=ADD)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilefoundry.errors import InternalCompilerError


@dataclass(frozen=True)
class SurfaceEntry:
    """`name(*inputs, **attrs)` builds `Call(op_class(**fixed, **attrs), inputs)`; `rewrite(*args,
    **kwargs) -> (args, kwargs)`, when given, first turns the user's spelling into those."""

    name: str
    op_class: type
    fixed: dict[str, Any] = field(default_factory=dict)
    rewrite: Callable[..., tuple[tuple, dict[str, Any]]] | None = None


_SURFACE: dict[str, SurfaceEntry] = {}
_SURFACES_OF_CLASS: dict[type, list[SurfaceEntry]] = {}


def register_surface(
    name: str,
    op_class: type,
    *,
    rewrite: Callable[..., tuple[tuple, dict[str, Any]]] | None = None,
    **fixed: Any,
) -> None:
    if name in _SURFACE:
        raise InternalCompilerError(
            f"surface name tf.{name} is already taken by {_SURFACE[name].op_class.__name__}"
        )
    _SURFACE[name] = entry = SurfaceEntry(name, op_class, dict(fixed), rewrite)
    _SURFACES_OF_CLASS.setdefault(op_class, []).append(entry)


def surface_entry(name: str) -> SurfaceEntry | None:
    return _SURFACE.get(name)


def surface_of(op: Any) -> SurfaceEntry | None:
    """The entry that builds `op` from its own attributes: one of its class whose fixed
    attributes `op` has, an entry without a `rewrite` (it takes the schema's arguments: `iota`,
    not `arange`) before one with, the first registered among equals; None for an op the DSL
    does not spell."""
    attrs = op.attributes()
    matching = [
        entry
        for entry in _SURFACES_OF_CLASS.get(type(op), ())
        if all(attrs.get(name) == value for name, value in entry.fixed.items())
    ]
    return min(matching, key=lambda entry: entry.rewrite is not None, default=None)


def surface_names() -> tuple[str, ...]:
    return tuple(sorted(_SURFACE))
