"""Sharded values: one local array per device of a mesh, and the block geometry behind them.

DESIGN §4.12: a value whose type carries a ShardLayout that is not fully Broadcast is held per
device (Split: the device's share; Broadcast: a full replica; Partial: an addend). A value whose
type is plain or fully Broadcast is one global array, even when a mesh computed it
(`replicated_value` collapses the replicas); only `Local`, and what is computed from its result,
is a per-device value of a plain type. A device's share along a logical axis is one contiguous
block when the Splits are the axis's outermost factors (the canonical layout), and the strided set
the layout algebra gives when one splits an inner factor (`strided_indices`); the reading of which
mesh axes split which factor is `shard_reading.axis_splits`, shared with the SPMD exit.
Coordinates enumerate the mesh row-major, which is the device order of the XLA exit (DESIGN §4.13).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as cartesian
from math import prod

import numpy as np

from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError
from tilefoundry.evaluator.collectives import Coord, all_reduce, partial_addends
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Broadcast, Mesh, Partial, ShardLayout
from tilefoundry.ir.types.shard.int_tuple import is_int
from tilefoundry.sharding.shard_reading import AxisSplit, axis_splits

EVALUATOR = "the reference evaluator"
"""How the evaluator names itself where a shared reader (axis_splits, the block plan)
refuses, so the message says which engine cannot run the program."""


@dataclass
class MeshValue:
    """Per-device arrays of one value. `type` is the IR type it was produced with: a ShardLayout
    type (global logical `shape`), or a plain type when `per_device` (a `Local` result, or one
    computed from it: each shard is its own value, with no global reading)."""

    mesh: Mesh
    type: TensorType
    shape: tuple[int, ...]
    shards: dict[Coord, np.ndarray]
    per_device: bool = False

    @property
    def sharded(self) -> bool:
        return isinstance(self.type.layout, ShardLayout)


def is_replicated_type(type_: object) -> bool:
    """Whether values of `type_` are one global value: plain, or a ShardLayout that Broadcasts
    on every mesh axis (no Split, no pending Partial, nothing left Dynamic)."""
    layout = getattr(type_, "layout", None)
    if not isinstance(layout, ShardLayout):
        return True
    return all(isinstance(attr, Broadcast) for attr in layout.attrs)


class DivergentReplicas(InternalCompilerError):
    """Devices disagree on a value whose type says it is replicated: the rule that typed it (or
    the op's simulation) is wrong. The validator reports it as an unsound acceptance."""


def replicated_value(value: MeshValue, where: str) -> np.ndarray:
    """The one global array of a replicated-typed value computed on a mesh; every device must
    hold the same array (DESIGN §4.12), else it is our bug and fails loudly."""
    coords = list(value.shards)
    first = value.shards[coords[0]]
    for coord in coords[1:]:
        if not same_values(first, value.shards[coord]):
            raise DivergentReplicas(
                f"{where}: its result is typed {value.type}, one replicated value, but devices "
                f"{coords[0]} and {coord} of {value.mesh!r} hold different replicas of it; the "
                "op's sharding rule or its simulation is wrong (an internal error: report it)"
            )
    return np.array(first, copy=True)


def devices(mesh: Mesh, where: str = "evaluator") -> list[Coord]:
    """Every device coordinate, row-major; a launch-sized mesh cannot be simulated."""
    if not all(is_int(extent) for extent in mesh.shape):
        raise UnsupportedError(
            f"{where}: mesh {mesh!r} has a dynamic extent, which the reference evaluator cannot "
            "simulate; give the mesh static extents (e.g. make_mesh((4,), topology=...))"
        )
    return list(cartesian(*(range(extent) for extent in mesh.shape)))


def block_count(mesh: Mesh, mesh_axes: tuple[int, ...]) -> int:
    return prod(mesh.shape[a] for a in mesh_axes)


def block_index(mesh: Mesh, mesh_axes: tuple[int, ...], coord: Coord) -> int:
    """Mixed-radix block number of `coord` over `mesh_axes` (outermost first)."""
    index = 0
    for axis in mesh_axes:
        index = index * mesh.shape[axis] + coord[axis]
    return index


def block_range(
    extent: int, mesh: Mesh, mesh_axes: tuple[int, ...], coord: Coord, where: str
) -> tuple[int, int]:
    count = block_count(mesh, mesh_axes)
    if extent % count:
        axes = ", ".join(mesh_axis_label(mesh, a) for a in mesh_axes)
        raise EvalError(f"{where}: extent {extent} does not divide evenly over {axes} ({count})")
    size = extent // count
    start = block_index(mesh, mesh_axes, coord) * size
    return start, start + size


AxisIndex = slice | np.ndarray
"""A device's indices along one logical axis: a contiguous block, or a strided set (sorted)."""


def strided_indices(
    extent: int, mesh: Mesh, split: AxisSplit, coord: Coord, where: str
) -> np.ndarray:
    """The indices of an axis of `extent` that `coord` holds under a Split on inner factors.

    The axis linearises its layout factors row-major (the regroup rule, semantic-analysis
    §3.1), and `Split(k)` puts the device's mesh coordinate into factor k (shard-layout §7.2),
    so a device holds every index whose digit at each split factor is its coordinate there.
    """
    factors = _concrete_factors(split.factors, extent, where)
    numbers = np.arange(extent, dtype=np.int64)
    mine = np.ones(extent, dtype=bool)
    for offset, mesh_axis in zip(split.offsets, split.mesh_axes, strict=True):
        inner = prod(factors[offset + 1 :])
        mine &= (numbers // inner) % factors[offset] == coord[mesh_axis]
    return np.flatnonzero(mine)


def _concrete_factors(factors: tuple, extent: int, where: str) -> tuple[int, ...]:
    """The layout factors of an axis as integers: at most one symbolic one, solved from the
    concrete `extent` (the others must divide it)."""
    known = [f for f in factors if is_int(f)]
    unknown = len(factors) - len(known)
    if unknown > 1 or extent % max(prod(known), 1) or (not unknown and prod(known) != extent):
        raise UnsupportedError(
            f"{where}: the layout factors {factors} of a split axis do not resolve against its "
            f"extent {extent}; the reference evaluator needs all but one factor static"
        )
    rest = extent // max(prod(known), 1)
    return tuple(f if is_int(f) else rest for f in factors)


def axis_indices(
    type_: TensorType, shape: tuple[int, ...], coord: Coord, where: str
) -> tuple[AxisIndex, ...]:
    """Per logical axis, the global indices `coord` holds of a ShardLayout value of `shape`."""
    mesh = type_.layout.mesh
    splits = axis_splits(type_, where, EVALUATOR, inner_factors=True)
    result: list[AxisIndex] = []
    for axis, extent in enumerate(shape):
        split = splits.get(axis)
        if split is None:
            result.append(slice(None))
        elif split.canonical:
            result.append(slice(*block_range(extent, mesh, split.mesh_axes, coord, where)))
        else:
            result.append(strided_indices(extent, mesh, split, coord, where))
    return tuple(result)


def as_index(per_axis: tuple[AxisIndex, ...], shape: tuple[int, ...]) -> tuple:
    """A numpy index selecting the cartesian product of per-axis indices (an outer index)."""
    if all(isinstance(i, slice) for i in per_axis):
        return tuple(per_axis)
    arrays = [
        np.arange(extent)[i] if isinstance(i, slice) else i
        for i, extent in zip(per_axis, shape, strict=True)
    ]
    return np.ix_(*arrays)


def index_key(per_axis: tuple[AxisIndex, ...]) -> tuple:
    """A hashable name for a device's share, equal for devices that hold the same one."""
    return tuple((i.start, i.stop) if isinstance(i, slice) else tuple(i.tolist()) for i in per_axis)


def block_of(type_: TensorType, shape: tuple[int, ...], coord: Coord, where: str) -> tuple:
    """The numpy index of `coord`'s share of a ShardLayout value of concrete `shape`."""
    return as_index(axis_indices(type_, shape, coord, where), shape)


def scatter(
    array: np.ndarray,
    type_: TensorType,
    where: str,
    *,
    seed: int = 0,
    split_partials: bool = True,
) -> MeshValue:
    """The per-device shards of the global `array` under `type_`'s ShardLayout.

    Partial mesh axes split each block into addends (`partial_addends`, seeded per mesh axis so
    two Partial axes stay independent), innermost mesh axis first, each Partial axis splitting
    the addend of the one after it: `complete` reduces mesh axis 0 first, so a value pending two
    reductions that do not commute (max on x, sum on y) reads back as it was placed, as the
    validator's `place` splits it.
    `split_partials=False` places `array` as it is on every device of a Partial axis (a Reshard
    carrying one addend to its new layout).
    """
    layout: ShardLayout = type_.layout
    mesh = layout.mesh
    partial = [
        (m, a.reduction)
        for m, a in enumerate(layout.attrs)
        if isinstance(a, Partial) and split_partials
    ]
    shards = {}
    for coord in devices(mesh, where):
        value = np.asarray(array[block_of(type_, array.shape, coord, where)])
        for mesh_axis, reduction in reversed(partial):
            addends = partial_addends(value, mesh.shape[mesh_axis], reduction, seed + mesh_axis)
            value = addends[coord[mesh_axis]]
        shards[coord] = np.array(value, copy=True)
    return MeshValue(mesh, type_, tuple(array.shape), shards)


def complete(
    value: MeshValue, where: str, *, complete_partials: bool, keep: frozenset[int] = frozenset()
) -> MeshValue:
    """`value` with every pending Partial all-reduced, except on the mesh axes in `keep`;
    refused unless `complete_partials`."""
    shards = value.shards
    for mesh_axis, attr in enumerate(value.type.layout.attrs):
        if not isinstance(attr, Partial) or mesh_axis in keep:
            continue
        if not complete_partials:
            raise EvalError(
                f"{where}: the value is Partial({attr.reduction}) on "
                f"{mesh_axis_label(value.mesh, mesh_axis)}, so no device holds the complete value; "
                "reshard it to Broadcast in the program, or pass complete_partials=True"
            )
        shards = all_reduce(shards, mesh_axis, attr.reduction, where)
    return MeshValue(value.mesh, value.type, value.shape, shards)


def gather(
    value: MeshValue,
    where: str,
    *,
    complete_partials: bool = False,
    keep: frozenset[int] = frozenset(),
) -> np.ndarray:
    """The global array of a sharded value; replicas of one block must agree exactly.

    `keep` names Partial mesh axes left pending: the caller passes the shards of one coordinate
    along them, and gets that addend's global array (a Reshard that keeps a Partial needs it).
    """
    if not value.sharded:
        return _common_plain(value, where)
    full = complete(value, where, complete_partials=complete_partials, keep=keep)
    first = next(iter(full.shards.values()))
    result = np.empty(full.shape, dtype=first.dtype)
    written: dict[tuple, Coord] = {}
    for coord, shard in full.shards.items():
        per_axis = axis_indices(full.type, full.shape, coord, where)
        index, key = as_index(per_axis, full.shape), index_key(per_axis)
        if key in written:
            if not same_values(result[index], shard):
                raise EvalError(
                    f"{where}: devices {written[key]} and {coord} hold different replicas of the "
                    "same block; the sharding rule that typed this value as replicated is unsound"
                )
            continue
        result[index] = shard
        written[key] = coord
    return result


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact equality with NaN equal to NaN; narrow floats (ml_dtypes) compare through f32."""
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64), equal_nan=True))


def _common_plain(value: MeshValue, where: str) -> np.ndarray:
    arrays = list(value.shards.values())
    if all(same_values(arrays[0], a) for a in arrays[1:]):
        return arrays[0].copy()
    raise UnsupportedError(
        f"{where}: a per-device value (from Local) differs across the devices of {value.mesh!r} "
        "and has no single global value; reshard the sharded value instead of returning a local"
    )
