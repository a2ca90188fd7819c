"""A Reshard as the collectives its type change implies, and nothing else.

The evaluator defines a Reshard as "complete every Partial the target does not keep, assemble the
global value, give each device what the target layout says" (DESIGN §4.12). On devices that is
done with the least data movement this exit knows, in three phases:

1. each pending Partial the target does not keep is all-reduced with its own reduction, in mesh
   axis order, consecutive axes with the same reduction in one all-reduce (sum over x then max
   over y is not max then sum, so only neighbours merge);
2. Splits the target does not keep are undone: a mesh axis leaving logical axis a for the
   innermost new Split of logical axis b is one `all_to_all`; otherwise the Splits of an axis
   beyond what it shares with its target (a common outermost prefix keeps its blocks) are
   gathered by one `all_gather` over those mesh axes;
3. each axis still missing target Splits is cut to the device's block by a local
   `dynamic_slice` (Broadcast -> Split moves no data).
"""

from __future__ import annotations

from itertools import groupby

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.spmd_collectives import DeviceBody, Shard
from tilefoundry.exits.spmd_mesh import logical_splits, partial_axes
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import ShardLayout

Splits = dict[int, tuple[int, ...]]


def _prefix(held: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    return wanted[: len(held)] == held


def _all_to_all_step(cur: Splits, tgt: Splits) -> tuple[int, int, int] | None:
    """(from axis, to axis, mesh axis) when one mesh axis can move between logical axes."""
    for source, held in cur.items():
        mesh_axis = held[-1]
        if _prefix(held, tgt.get(source, ())):
            continue
        for dest, wanted in tgt.items():
            now = cur.get(dest, ())
            if (
                dest != source
                and _prefix(now, wanted)
                and wanted[len(now) : len(now) + 1] == (mesh_axis,)
            ):
                return source, dest, mesh_axis
    return None


def reshard(x: Shard, out_type: TensorType, body: DeviceBody, where: str) -> Shard:
    if x.per_device:
        raise UnsupportedError(
            f"{where}: cannot reshard a per-device (Local) value; it has no global value to "
            "redistribute"
        )
    for type_ in (x.type, out_type):
        layout = type_.layout
        if isinstance(layout, ShardLayout) and layout.mesh != body.mesh:
            raise UnsupportedError(
                f"{where}: moves a value between meshes ({layout.mesh!r} and {body.mesh!r}); the "
                "SPMD exit runs one program on one device mesh"
            )
    value = x
    held, wanted = partial_axes(x.type), partial_axes(out_type)
    pending = [(m, r) for m, r in sorted(held.items()) if wanted.get(m) != r]
    for reduction, run in groupby(pending, key=lambda pair: pair[1]):
        axes = [m for m, _ in run]
        value = body.all_reduce(value, axes, reduction, out_type, where)

    cur = logical_splits(x.type, where)
    tgt = logical_splits(out_type, where)
    while True:
        step = _all_to_all_step(cur, tgt)
        if step is not None:
            source, dest, mesh_axis = step
            value = body.all_to_all(value, dest, source, mesh_axis, out_type, where)
            cur[source] = cur[source][:-1]
            cur[dest] = (*cur.get(dest, ()), mesh_axis)
        else:
            stale = [a for a, axes in cur.items() if not _prefix(axes, tgt.get(a, ()))]
            if not stale:
                break
            axis = stale[0]
            keep = 0
            while keep < len(cur[axis]) and _prefix(cur[axis][: keep + 1], tgt.get(axis, ())):
                keep += 1
            value = body.all_gather(value, axis, cur[axis][keep:], out_type, where)
            cur[axis] = cur[axis][:keep]
        cur = {a: axes for a, axes in cur.items() if axes}
    cuts = {a: axes[len(cur.get(a, ())) :] for a, axes in tgt.items() if axes != cur.get(a, ())}
    return body.take_blocks(value, cuts, out_type)
