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
3. each axis still missing target Splits is cut to the device's block: where the new Split's
   mesh axes carry a pending reduction (Partial -> Split), the all-reduce of phase 1 and the cut
   are one reduce-scatter (each device receives only its block of the reduced value: 1/N of the
   all-reduce's result); otherwise by a local slice (Broadcast -> Split moves no data).

A value moving between two meshes over one device set is planned on their common refinement
(`mesh_views`), so it is the same three phases over device-id digits.

The SPMD exit emits exactly these steps and the inspector (`show`, the report) describes them,
so what a reader is told a Reshard costs is what the compiled program does. The plan is pure: it
reads only the two types.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from tilefoundry.ir.types import Type
from tilefoundry.sharding.mesh_views import Refinement, mesh_of, refine
from tilefoundry.sharding.shard_reading import Splits


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


@dataclass(frozen=True)
class ReduceScatter:
    """A pending `reduction` over `mesh_axes` completed and logical axis `axis` cut to each
    device's block over the same mesh axes, in one collective: each device receives only its
    block of the reduced value (a Partial -> Split)."""

    axis: int
    mesh_axes: tuple[int, ...]
    reduction: str


Step = AllReduce | AllToAll | AllGather | ReduceScatter | Slice


def plan_reshard(
    source_type: Type,
    target_type: Type,
    where: str,
    *,
    engine: str = "the SPMD exit",
    reduce_scatter: bool = True,
) -> list[Step]:
    """The steps that carry a value of `source_type` to `target_type` on every device, in order
    (empty: only the type changes). Two views of one device set (`mesh_views`) are read on
    their common refinement, whose axes the steps then name (`reshard_mesh` gives it).
    Non-canonical layouts and meshes without a common refinement fail closed; `engine` names
    who refuses (the plan is the SPMD exit's unless told otherwise). `reduce_scatter=False` is
    the plan of a backend without one: all-reduce, then slice."""
    views = reshard_views(source_type, target_type, where, engine)
    if views is None:
        return []
    return plan_readings(
        views.splits(source_type, where, engine),
        views.splits(target_type, where, engine),
        views.partials(source_type),
        views.partials(target_type),
        reduce_scatter=reduce_scatter,
    )


def reshard_views(
    source_type: Type, target_type: Type, where: str, engine: str
) -> Refinement | None:
    """The mesh a Reshard's plan runs on: the common refinement of its two types' meshes (the
    one mesh when they share it); None when neither side is sharded."""
    meshes = [m for m in (mesh_of(source_type), mesh_of(target_type)) if m is not None]
    return refine(meshes, where, engine) if meshes else None


def plan_readings(
    cur: Splits,
    tgt: Splits,
    held: dict[int, str],
    wanted: dict[int, str],
    *,
    reduce_scatter: bool = True,
) -> list[Step]:
    """The plan from the two readings (logical axis -> splitting mesh axes; mesh axis ->
    pending reduction), all on one mesh. `cur` is not modified."""
    cur = dict(cur)
    pending = {m: r for m, r in sorted(held.items()) if wanted.get(m) != r}
    undo = _undo_splits(cur, tgt)
    cuts = [(a, axes[len(cur.get(a, ())) :]) for a, axes in tgt.items() if axes != cur.get(a, ())]
    scatters: list[Step] = []
    # Moving a reduction after the data movement is sound only when every pending reduction is
    # the same: sum over x then max over y is not max over y then sum over x.
    if reduce_scatter and len(set(pending.values())) == 1:
        reduction = next(iter(pending.values()))
        kept_cuts = []
        for axis, axes in cuts:
            count = 0
            while count < len(axes) and axes[count] in pending:
                count += 1
            if count:
                scatters.append(ReduceScatter(axis, axes[:count], reduction))
                for m in axes[:count]:
                    del pending[m]
            if axes[count:]:
                kept_cuts.append((axis, axes[count:]))
        cuts = kept_cuts
    steps: list[Step] = [
        AllReduce(tuple(m for m, _ in run), reduction)
        for reduction, run in groupby(pending.items(), key=lambda pair: pair[1])
    ]
    steps += undo + scatters
    if cuts:
        steps.append(Slice(tuple(cuts)))
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
