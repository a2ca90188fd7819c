"""Sharded values: one local array per device of a mesh, and the block geometry behind them.

DESIGN §4.12: a value whose type carries a ShardLayout is held per device (Split: the device's
block; Broadcast: a full replica; Partial: an addend). Only canonical layouts are simulated, where
the Splits of a logical axis are its outermost factors, so each device holds one contiguous block;
any other factorisation is refused rather than guessed (`shard_reading.canonical_splits`, the one
reading the SPMD exit shares). Coordinates enumerate the mesh row-major, which is the device order
of the XLA exit (DESIGN §4.13).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as cartesian
from math import prod

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.evaluator.collectives import Coord, all_reduce, partial_addends
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Mesh, Partial, ShardLayout
from tilefoundry.ir.types.shard.int_tuple import is_int
from tilefoundry.visitor_registry.shard_reading import canonical_splits

EVALUATOR = "the reference evaluator"
"""How the evaluator names itself where a shared reader (canonical_splits, the block plan)
refuses, so the message says which engine cannot run the program."""


@dataclass
class MeshValue:
    """Per-device arrays of one value. `type` is the IR type it was produced with: a ShardLayout
    type (global logical `shape`), or a plain type from `Local` (each shard is its own value)."""

    mesh: Mesh
    type: TensorType
    shape: tuple[int, ...]
    shards: dict[Coord, np.ndarray]

    @property
    def sharded(self) -> bool:
        return isinstance(self.type.layout, ShardLayout)


def devices(mesh: Mesh) -> list[Coord]:
    """Every device coordinate, row-major; a launch-sized mesh cannot be simulated."""
    if not all(is_int(extent) for extent in mesh.shape):
        raise UnsupportedError(
            f"evaluator: mesh {mesh!r} has a dynamic extent; the simulation needs a static mesh"
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


def block_slices(
    type_: TensorType, shape: tuple[int, ...], coord: Coord, where: str
) -> tuple[slice, ...]:
    """The global index of `coord`'s block of a ShardLayout value of concrete `shape`."""
    mesh = type_.layout.mesh
    splits = canonical_splits(type_, where, EVALUATOR)
    slices = []
    for axis, extent in enumerate(shape):
        if axis in splits:
            start, stop = block_range(extent, mesh, splits[axis], coord, where)
            slices.append(slice(start, stop))
        else:
            slices.append(slice(None))
    return tuple(slices)


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
    two Partial axes stay independent); each Partial axis splits the previous axis's addend.
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
    for coord in devices(mesh):
        value = np.asarray(array[block_slices(type_, array.shape, coord, where)])
        for mesh_axis, reduction in partial:
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
        shards = all_reduce(shards, mesh_axis, attr.reduction)
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
        index = block_slices(full.type, full.shape, coord, where)
        key = tuple((s.start, s.stop) for s in index)
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
