"""How every engine reads a ShardLayout type: which mesh axes split which logical axis, and which
mesh axes carry a pending reduction (DESIGN §4.12).

The reference evaluator, the SPMD exit and the block plan they share must agree on which block of
a value each device holds, or the exit's output is not checkable against the simulation; so they
read it here, once. A Split names a layout position; a device's share is one contiguous block only
when the Splits of each logical axis are its outermost factors (the canonical layout every
annotation produces). A Split on an inner factor gives each device a strided share, which an
engine reads only if it says it can (`axis_splits(..., inner_factors=True)`: the evaluator);
anything else is refused rather than guessed, in the words of the engine that asked (`engine`,
e.g. "the reference evaluator"), since only the engine knows its remedy.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import TensorType, Type
from tilefoundry.ir.types.shard import Layout, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.ir.types.shard.mesh import is_device_mesh
from tilefoundry.sharding.shard_propagate import partial_reductions_by_axis
from tilefoundry.sharding.shard_regroup import logical_groups

EXIT = "the SPMD exit"

Splits = dict[int, tuple[int, ...]]
"""Logical axis -> the mesh axes splitting it, outermost block first."""


@dataclass(frozen=True)
class AxisSplit:
    """How mesh axes split one logical axis.

    `mesh_axes` are the splitting mesh axes in the order of the factors they split, outermost
    first. `factors` is None for a canonical split (the split factors are the axis's outermost
    ones, so a device's share is one contiguous block, numbered mixed-radix over `mesh_axes`).
    Otherwise it is the axis's layout factors, outermost first (the regroup rule linearises them
    row-major), and `offsets[i]` is the factor that `mesh_axes[i]` splits: a device then holds
    the indices whose digit at each split factor is its coordinate on that mesh axis, a strided
    set.
    """

    mesh_axes: tuple[int, ...]
    factors: tuple | None = None
    offsets: tuple[int, ...] = ()

    @property
    def canonical(self) -> bool:
        return self.factors is None


def canonical_splits(type_: Type, where: str, engine: str) -> Splits:
    """Logical axis -> the mesh axes splitting it, outermost first ({} for an unsharded type).

    Blocks are numbered mixed-radix over those mesh axes, which is a contiguous cut only for a
    canonical layout; a Split on an inner factor (or on a position that factors no single logical
    axis) fails closed with UnsupportedError naming `where` and `engine`.
    """
    return {axis: split.mesh_axes for axis, split in axis_splits(type_, where, engine).items()}


def axis_splits(
    type_: Type, where: str, engine: str, *, inner_factors: bool = False
) -> dict[int, AxisSplit]:
    """Logical axis -> how mesh axes split it ({} for an unsharded type).

    A Split on an inner factor of a logical axis is read as a strided share when
    `inner_factors` (an engine that can hold one, such as the reference evaluator), and fails
    closed otherwise; a Split on a position that factors no single logical axis always fails
    closed with UnsupportedError naming `where` and `engine`.
    """
    layout = getattr(type_, "layout", None)
    if not isinstance(layout, ShardLayout):
        return {}
    if not isinstance(layout.layout, Layout):
        raise UnsupportedError(
            f"{where}: the ShardLayout over {type(layout.layout).__name__} {layout.layout} has no "
            f"block reading in {engine}; reshard to a canonical layout first"
        )
    positions = flatten(layout.layout.shape)
    groups = logical_groups(tuple(type_.shape), positions)
    by_position = {a.axis: m for m, a in enumerate(layout.attrs) if isinstance(a, Split)}
    result: dict[int, AxisSplit] = {}
    for logical_axis, group in enumerate(groups):
        split = [p for p in group or () if p in by_position]
        if not split:
            continue
        mesh_axes = tuple(by_position[p] for p in split)
        outer = list(group[: len(split)])
        if outer == split:
            result[logical_axis] = AxisSplit(mesh_axes)
            continue
        if not inner_factors:
            inner = next(p for p, o in zip(split, outer, strict=True) if p != o)
            what = f"an inner factor of logical axis {logical_axis}"
            raise _non_canonical(where, engine, type_, by_position[inner], what)
        factors = tuple(positions[p] for p in group)
        offsets = tuple(group.index(p) for p in split)
        result[logical_axis] = AxisSplit(mesh_axes, factors, offsets)
    claimed = {m for split in result.values() for m in split.mesh_axes}
    for position, mesh_axis in sorted(by_position.items()):
        if mesh_axis not in claimed:
            what = f"layout position {position}, which factors no single logical axis"
            raise _non_canonical(where, engine, type_, mesh_axis, what)
    return result


def strided_split_on_devices(type_: Type) -> tuple[int, AxisSplit] | None:
    """The first logical axis that a device mesh splits on an inner factor, with its reading, or
    None: a strided share per device, which the simulation holds and the SPMD exit cannot (its
    blocks and Shardy's shardings are contiguous), so an op that would create one on a device
    mesh refuses it when the program is checked (DESIGN §1)."""
    layout = getattr(type_, "layout", None)
    if not isinstance(layout, ShardLayout) or not is_device_mesh(layout.mesh):
        return None
    if not isinstance(layout.layout, Layout):
        return None  # a composition has no block reading at all; the exits refuse it as such
    for logical_axis, split in axis_splits(type_, "the value", EXIT, inner_factors=True).items():
        if not split.canonical:
            return logical_axis, split
    return None


def _non_canonical(
    where: str, engine: str, type_: TensorType, mesh_axis: int, what: str
) -> UnsupportedError:
    layout = type_.layout
    return UnsupportedError(
        f"{where}: {layout.mesh.axes[mesh_axis].label} splits {what} ({layout.layout} over "
        f"logical shape {list(type_.shape)}), so a device's share is not one contiguous block; "
        f"{engine} reads only canonical layouts (each Split the outermost factor of its logical "
        "axis): reshard to the canonical layout first (a parameter: declare it with the "
        "canonical layout, N @ m.a per logical axis)"
    )


def pending_partials(type_: Type) -> dict[int, str]:
    """Mesh axis -> pending reduction of each Partial (empty for an unsharded or non-tensor type):
    what a consumer must complete, or commute with, before it may read the value."""
    if not isinstance(type_, TensorType):
        return {}
    states = partial_reductions_by_axis(type_.layout)
    return {axis: reduction for axis, reduction in enumerate(states) if reduction is not None}
