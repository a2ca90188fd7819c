"""Rule registries and the engines' single entry point to per-op rules.

Engines (typeinfer, evaluator, emitter, fusion) import this package, never an op module; op
modules register their rules here by decorator when they are imported.
"""

from tilefoundry.visitor_registry.fusion_kind import FusionKind
from tilefoundry.visitor_registry.registry import (
    ACCESS_RELATION,
    CALLEE_TYPEINFER,
    EVAL,
    FUSION,
    PALLAS,
    PALLAS_REF_READERS,
    PALLAS_SHARDED,
    SHARDED_EVAL,
    SPMD_LOWERING,
    STABLEHLO,
    TYPEINFER,
    VALIDATION_SAMPLES,
    Registry,
    register_access_relation,
    register_callee_typeinfer,
    register_eval,
    register_fusion_kind,
    register_not_sampled,
    register_pallas,
    register_pallas_sharded,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_typeinfer,
    register_validation_samples,
    registered,
)
from tilefoundry.visitor_registry.surface import (
    SurfaceEntry,
    register_surface,
    surface_entry,
    surface_names,
)
from tilefoundry.visitor_registry.typeinfer import TypeInferContext, describe, typeinfer_call

__all__ = [
    "ACCESS_RELATION",
    "CALLEE_TYPEINFER",
    "EVAL",
    "FUSION",
    "PALLAS",
    "PALLAS_REF_READERS",
    "PALLAS_SHARDED",
    "SHARDED_EVAL",
    "SPMD_LOWERING",
    "STABLEHLO",
    "TYPEINFER",
    "VALIDATION_SAMPLES",
    "FusionKind",
    "Registry",
    "SurfaceEntry",
    "TypeInferContext",
    "describe",
    "register_access_relation",
    "register_callee_typeinfer",
    "register_eval",
    "register_fusion_kind",
    "register_not_sampled",
    "register_pallas",
    "register_pallas_sharded",
    "register_sharded_eval",
    "register_spmd_lowering",
    "register_stablehlo",
    "register_surface",
    "register_typeinfer",
    "register_validation_samples",
    "registered",
    "surface_entry",
    "surface_names",
    "typeinfer_call",
]
