"""The reference evaluator: the CPU oracle that simulates every device of a mesh (DESIGN §1, §4.12).

`evaluate(fn, *arrays)` runs a hir Function on global numpy arrays. The single-op entry points
(`run_op`, `run_op_on_devices`) and the `scatter`/`gather` pair are the seam the sharding-rule
validator drives: it places inputs in chosen per-mesh-axis states and compares the gathered
result with the unsharded one.
"""

from tilefoundry.evaluator.dtypes import SUPPORTED_DTYPES
from tilefoundry.evaluator.interpreter import evaluate
from tilefoundry.evaluator.mesh_sim import ShardedCall
from tilefoundry.evaluator.single_op import run_op, run_op_on_devices
from tilefoundry.evaluator.values import MeshValue, gather, scatter

__all__ = [
    "SUPPORTED_DTYPES",
    "MeshValue",
    "ShardedCall",
    "evaluate",
    "gather",
    "run_op",
    "run_op_on_devices",
    "scatter",
]
