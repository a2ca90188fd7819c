"""The op namespace `tf` (DESIGN §3): `tf.matmul`, `tf.add`, `tf.reduce(x, axes=..., kind="sum")`.

The namespace is the surface registry itself, read on attribute access: each op module declares
its spellings (`register_surface("add", Binary, kind=ADD)`), so a new op is reachable from the DSL
without touching this file, and Binary/Unary kinds are ordinary entries. The entries exist once
`tilefoundry.ir.hir` is imported (it imports every op namespace; registration is an import-time
side effect), which importing the frontend, and so this module, does.
"""

from __future__ import annotations

from tilefoundry.errors import VerifyError
from tilefoundry.frontend.calls import SurfaceOp
from tilefoundry.rules import surface_entry, surface_names


class UnknownOpError(VerifyError, AttributeError):
    """`tf.<name>` for a name no op registered (an AttributeError too, for `hasattr`)."""


class _Namespace:
    def __getattr__(self, name: str) -> SurfaceOp:
        entry = surface_entry(name)
        if entry is None:
            if name.startswith("__"):
                raise AttributeError(name)
            raise UnknownOpError(
                f"tf: unknown op '{name}'; known ops: {', '.join(surface_names())}"
            )
        return SurfaceOp(entry)

    def __dir__(self) -> list[str]:
        return list(surface_names())

    def __repr__(self) -> str:
        return "<tilefoundry.dsl.tf>"


tf = _Namespace()

__all__ = ["SurfaceOp", "UnknownOpError", "tf"]
