"""The pipeline between HIR and the exits: legalize, the strict verifier, fusion, and `compile`
(DESIGN §1, §6). `compile(fn)` = legalize -> verify -> fuse -> verify."""

from tilefoundry.passes.fuse import FusionReport, RegionReport, fuse, fuse_with_report
from tilefoundry.passes.fusion_rules import is_fusible_edge, should_fuse
from tilefoundry.passes.legalize import legalize
from tilefoundry.passes.manager import Pass, PassManager, compile
from tilefoundry.passes.verify import verify

__all__ = [
    "FusionReport",
    "Pass",
    "PassManager",
    "RegionReport",
    "compile",
    "fuse",
    "fuse_with_report",
    "is_fusible_edge",
    "legalize",
    "should_fuse",
    "verify",
]
