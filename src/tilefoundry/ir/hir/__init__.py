"""HIR: the pure SSA-as-DAG dataflow IR (Function, GridRegionExpr and the op namespaces).

Importing this package registers the typeinfer rules of Function, GridRegionExpr and FusionRegion.
"""

from tilefoundry.ir.hir.dispatch import canonical_signature, select_variant
from tilefoundry.ir.hir.elaborate import ElaborationSession, elaborate
from tilefoundry.ir.hir.function import Function
from tilefoundry.ir.hir.fusion_region import FusionRegion
from tilefoundry.ir.hir.grid_region import GridRegionExpr, make_grid_region

__all__ = [
    "ElaborationSession",
    "Function",
    "FusionRegion",
    "GridRegionExpr",
    "canonical_signature",
    "elaborate",
    "make_grid_region",
    "select_variant",
]

# Importing the op namespaces registers every op's rules (typeinfer, relation, kernel, surface).
from tilefoundry.ir.hir import math, nn, shape, sharding, tensor  # noqa: F401
