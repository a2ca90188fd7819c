"""What every emitted module carries, for both emitters: the StableHLO version it is pinned to
(a module attribute, and the target of the portable artifact) and its symbol."""

from __future__ import annotations

from tilefoundry.ir.lowering.mlir_text import mlir_symbol

STABLEHLO_TARGET_VERSION = "1.13.0"
"""The StableHLO version every emitted module is pinned to: recorded as a module attribute, and the
version a portable artifact is serialised at. 1.13.0 is within jaxlib 0.10.2's 12-week
compatibility window (its current version is 1.17.0) and covers every dtype this exit emits
(f8E4M3FN needs >= 1.7, f4E2M1FN >= 1.8)."""

VERSION_ATTRIBUTE = "tilefoundry.stablehlo_target"


def module_name(name: str) -> str:
    return mlir_symbol(name)
