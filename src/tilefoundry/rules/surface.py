"""The DSL surface names of ops: `tf.matmul`, `tf.add`, `tf.reduce`, ... (DESIGN §3).

Each op module declares its own surface spellings next to the op, so the frontend can build the
`tf` namespace without importing any op module, and a coverage test can check that every op is
reachable from the DSL. A surface entry may fix attributes: `add` is `Binary(kind=ADD)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefoundry.errors import InternalCompilerError


@dataclass(frozen=True)
class SurfaceEntry:
    """`name(*inputs, **attrs)` builds `Call(op_class(**fixed, **attrs), inputs)`."""

    name: str
    op_class: type
    fixed: dict[str, Any] = field(default_factory=dict)


_SURFACE: dict[str, SurfaceEntry] = {}


def register_surface(name: str, op_class: type, **fixed: Any) -> None:
    if name in _SURFACE:
        raise InternalCompilerError(
            f"surface name tf.{name} is already taken by {_SURFACE[name].op_class.__name__}"
        )
    _SURFACE[name] = SurfaceEntry(name, op_class, dict(fixed))


def surface_entry(name: str) -> SurfaceEntry | None:
    return _SURFACE.get(name)


def surface_names() -> tuple[str, ...]:
    return tuple(sorted(_SURFACE))
