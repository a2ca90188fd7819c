"""The package's old name, kept as a face for DESIGN §3 (`typeinfer_call`,
`visitor_registry.access_relation`, `visitor_registry.shard_propagate`) and for code written
against it.

Its contents moved to the packages named for what they are (issue 24): the rule tables to
`tilefoundry.rules`, the analyses to `tilefoundry.analysis`, the sharding engine to
`tilefoundry.sharding`. Each old submodule name is bound to the module that moved (the same
module object, so a registry is never duplicated). Nothing under src/ imports this face
(tests/api/test_architecture.py).
"""

import sys
from importlib import import_module

from tilefoundry.analysis import TypeInferContext, describe, typeinfer_call
from tilefoundry.rules import (
    ACCESS_RELATION,
    CALLEE_TYPEINFER,
    EVAL,
    EVAL_INTO,
    FUSION,
    PALLAS,
    PALLAS_REF_READERS,
    PALLAS_SHARDED,
    SHARDED_EVAL,
    SPMD_LOWERING,
    STABLEHLO,
    TYPEINFER,
    VALIDATION_SAMPLES,
    FusionKind,
    Registry,
    SurfaceEntry,
    register_access_relation,
    register_callee_typeinfer,
    register_eval,
    register_eval_into,
    register_fusion_kind,
    register_not_sampled,
    register_pallas,
    register_pallas_sharded,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    registered,
    surface_entry,
    surface_names,
)

_MOVED = {
    "access_relation": "tilefoundry.analysis.access_relation",
    "access_structure": "tilefoundry.analysis.access_structure",
    "storage": "tilefoundry.analysis.storage",
    "typeinfer": "tilefoundry.analysis.typeinfer",
    "fusion_kind": "tilefoundry.rules.fusion_kind",
    "registry": "tilefoundry.rules.registry",
    "surface": "tilefoundry.rules.surface",
    "validation_samples": "tilefoundry.rules.validation_samples",
    "axis_access": "tilefoundry.sharding.axis_access",
    "block_plan": "tilefoundry.sharding.block_plan",
    "mesh_views": "tilefoundry.sharding.mesh_views",
    "reshard_plan": "tilefoundry.sharding.reshard_plan",
    "shard_propagate": "tilefoundry.sharding.shard_propagate",
    "shard_reading": "tilefoundry.sharding.shard_reading",
    "shard_regroup": "tilefoundry.sharding.shard_regroup",
}
for _old, _home in _MOVED.items():
    sys.modules[f"{__name__}.{_old}"] = globals()[_old] = import_module(_home)

__all__ = [
    "ACCESS_RELATION",
    "CALLEE_TYPEINFER",
    "EVAL",
    "EVAL_INTO",
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
    "register_eval_into",
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
