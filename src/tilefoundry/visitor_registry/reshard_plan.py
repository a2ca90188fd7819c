"""A Reshard as the collectives its type change implies, decided once for every reader.

The evaluator defines a Reshard as "complete every Partial the target does not keep, assemble the
global value, give each device what the target layout says" (DESIGN §4.12). On devices that is
done with the least data movement we know, in three phases:

1. each pending Partial the target does not keep is all-reduced with its own reduction, in mesh
   axis order, consecutive axes with the same reduction in one all-reduce (sum over x then max
   over y is not max then sum, so only neighbours merge);
2. Splits the target does not keep are undone: a mesh axis leaving logical axis a for the
   innermost new Split of logical axis b is one all-to-all; otherwise the Splits of an axis
   beyond what it shares with its target (a common outermost prefix keeps its blocks) are
   gathered by one all-gather over those mesh axes;
3. each axis still missing target Splits is cut to the device's block by a local slice
   (Broadcast -> Split moves no data).

The SPMD exit emits exactly these steps and the inspector (`show`, the report) describes them,
so what a reader is told a Reshard costs is what the compiled program does. The plan is pure: it
reads only the two types.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import Type
from tilefoundry.ir.types.shard import ShardLayout
from tilefoundry.visitor_registry.shard_reading import Splits, canonical_splits, pending_partials


@dataclass(frozen=True)
class AllReduce:
    """Every device of a group over `mesh_axes` ends with the `reduction` of its members'."""

    mesh_axes: tuple[int, ...]
    reduction: str


@dataclass(frozen=True)
class AllToAll:
    """`mesh_axis` stops splitting logical axis `source` and becomes the innermost Split of
    logical axis `dest`: each device trades blocks with its group."""

    source: int
    dest: int
    mesh_axis: int


@dataclass(frozen=True)
class AllGather:
    """Logical axis `axis` stops being split by `mesh_axes` (its innermost Splits)."""

    axis: int
    mesh_axes: tuple[int, ...]


@dataclass(frozen=True)
class Slice:
    """Each device keeps its block of logical axis `a` over mesh axes `m`, for each `(a, m)` in
    `cuts`; local, nothing moves between devices. Always the last step when present."""

    cuts: tuple[tuple[int, tuple[int, ...]], ...]


Step = AllReduce | AllToAll | AllGather | Slice


def plan_reshard(
    source_type: Type, target_type: Type, where: str, *, engine: str = "the SPMD exit"
) -> list[Step]:
    """The steps that carry a value of `source_type` to `target_type` on every device, in order
    (empty: only the type changes). Non-canonical layouts, and moving a value between two meshes,
    fail closed; `engine` names who refuses (the plan is the SPMD exit's unless told otherwise).
    """
    meshes = [
        type_.layout.mesh
        for type_ in (source_type, target_type)
        if isinstance(getattr(type_, "layout", None), ShardLayout)
    ]
    if len(meshes) == 2 and meshes[0] != meshes[1]:
        raise UnsupportedError(
            f"{where}: moves a value between meshes ({meshes[0]!r} and {meshes[1]!r}); "
            f"{engine} runs one program on one device mesh"
        )
    held, wanted = pending_partials(source_type), pending_partials(target_type)
    pending = [(m, r) for m, r in sorted(held.items()) if wanted.get(m) != r]
    steps: list[Step] = [
        AllReduce(tuple(m for m, _ in run), reduction)
        for reduction, run in groupby(pending, key=lambda pair: pair[1])
    ]
    cur = canonical_splits(source_type, where, engine)
    tgt = canonical_splits(target_type, where, engine)
    steps.extend(_undo_splits(cur, tgt))
    cuts = tuple(
        (a, axes[len(cur.get(a, ())) :]) for a, axes in tgt.items() if axes != cur.get(a, ())
    )
    if cuts:
        steps.append(Slice(cuts))
    return steps


def _prefix(held: tuple[int, ...], wanted: tuple[int, ...]) -> bool:
    return wanted[: len(held)] == held


def _undo_splits(cur: Splits, tgt: Splits) -> list[Step]:
    """Phase 2: all-to-alls and all-gathers until every axis's Splits are a prefix of its
    target's; `cur` is updated in place to what the devices then hold."""
    steps: list[Step] = []
    while True:
        step = _all_to_all_step(cur, tgt)
        if step is not None:
            steps.append(step)
            cur[step.source] = cur[step.source][:-1]
            cur[step.dest] = (*cur.get(step.dest, ()), step.mesh_axis)
        else:
            stale = [a for a, axes in cur.items() if not _prefix(axes, tgt.get(a, ()))]
            if not stale:
                break
            axis = stale[0]
            keep = 0
            while keep < len(cur[axis]) and _prefix(cur[axis][: keep + 1], tgt.get(axis, ())):
                keep += 1
            steps.append(AllGather(axis, cur[axis][keep:]))
            cur[axis] = cur[axis][:keep]
        for axis in [a for a, axes in cur.items() if not axes]:
            del cur[axis]
    return steps


def _all_to_all_step(cur: Splits, tgt: Splits) -> AllToAll | None:
    """The first mesh axis that can move between logical axes in one all-to-all, if any."""
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
                return AllToAll(source, dest, mesh_axis)
    return None
