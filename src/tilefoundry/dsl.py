"""The op namespace `tf` (DESIGN §3): `tf.matmul`, `tf.add`, `tf.reduce(x, axes=..., kind="sum")`.

The namespace is the surface registry itself, read on attribute access: each op module declares
its spellings (`register_surface("add", Binary, kind=ADD)`), so a new op is reachable from the DSL
without touching this file, and Binary/Unary kinds are ordinary entries. Importing this module
loads every HIR op module, because registration is an import-time side effect.
"""

from __future__ import annotations

import importlib
import pkgutil

from tilefoundry.caches import memoize
from tilefoundry.errors import VerifyError
from tilefoundry.frontend.calls import SurfaceOp
from tilefoundry.rules import surface_entry, surface_names

OP_NAMESPACES = ("math", "tensor", "nn", "shape", "sharding")


@memoize("dsl: op catalog loaded", 1)
def load_op_catalog() -> None:
    """Import every module under `tilefoundry.ir.hir.<namespace>` so each registers its rules."""
    for namespace in OP_NAMESPACES:
        package = importlib.import_module(f"tilefoundry.ir.hir.{namespace}")
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            importlib.import_module(info.name)


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


load_op_catalog()
tf = _Namespace()

__all__ = ["OP_NAMESPACES", "SurfaceOp", "UnknownOpError", "load_op_catalog", "tf"]
