"""A Reshard on devices: the steps of its plan (`sharding.reshard_plan`), emitted.

Which collectives a Reshard needs is decided once, by the pure plan the inspector also describes,
so `show` and the report say what this exit emits; here each step becomes its StableHLO
collective (or, for the final local cut, a `dynamic_slice`) over the device body. A Partial ->
Split is one `reduce_scatter`: jaxlib 0.10.2's XLA CPU runtime executes it on N devices (the
multi-device tests run it against the simulation), so no backend here needs the all-reduce +
slice fallback `plan_reshard(..., reduce_scatter=False)` describes.
"""

from __future__ import annotations

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.stablehlo.spmd.collectives import DeviceBody, Shard
from tilefoundry.exits.stablehlo.spmd.mesh import EXIT
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Mesh
from tilefoundry.sharding.reshard_plan import (
    AllGather,
    AllReduce,
    AllToAll,
    ReduceScatter,
    Slice,
    Step,
    plan_reshard,
    reshard_views,
)


def reshard(x: Shard, out_type: TensorType, body: DeviceBody, where: str) -> Shard:
    """`x` carried to `out_type` on every device by the steps of its plan. A Local value (no
    global value to redistribute) is refused here, before any step, because the plan knows no
    per-device values. Between two views of the device set the steps run on the views' common
    refinement (`reshard_views`), whose replica groups are the same device ids."""
    if x.per_device:
        raise UnsupportedError(
            f"{where}: cannot reshard a per-device (Local) value; it has no global value to "
            "redistribute"
        )
    views = reshard_views(x.type, out_type, where, EXIT)
    steps = plan_reshard(x.type, out_type, where, engine=EXIT)
    # Retyping emits nothing; every step below keeps the target type on what it produces.
    value = body.take_blocks(x, {}, out_type)
    for step in steps:
        value = _emit(step, value, out_type, body, where, views.mesh)
    return value


def _emit(
    step: Step, value: Shard, out_type: TensorType, body: DeviceBody, where: str, mesh: Mesh
) -> Shard:
    """One step as StableHLO on `mesh`; an all-to-all splits the axis the mesh axis moves to
    and concatenates the one it leaves."""
    if isinstance(step, AllReduce):
        return body.all_reduce(value, list(step.mesh_axes), step.reduction, out_type, where, mesh)
    if isinstance(step, ReduceScatter):
        return body.reduce_scatter(
            value, step.axis, list(step.mesh_axes), step.reduction, out_type, where, mesh
        )
    if isinstance(step, AllToAll):
        return body.all_to_all(value, step.dest, step.source, step.mesh_axis, out_type, where, mesh)
    if isinstance(step, AllGather):
        return body.all_gather(value, step.axis, step.mesh_axes, out_type, where, mesh)
    assert isinstance(step, Slice)
    return body.take_blocks(value, dict(step.cuts), out_type, mesh)
