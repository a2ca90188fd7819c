"""Per-device execution of one op call over a mesh (DESIGN §4.12).

Per device, an op computes its block of the iteration domain, as the call's `BlockPlan` says
(the plan the SPMD exit writes as StableHLO, so the two agree): the domain dims that input Splits
bind to mesh axes are partitioned, each input is read through its access map restricted to that
block (a replicated input is sliced locally along the projection axes of partitioned dims, never
communicated), and the kernel runs on the local arrays with a local `out_type`. What each device
then holds is read through the call's own type: its block (Split), a replica (Broadcast) or an
addend (Partial). The only communication is the all-reduce of a complete-effect reduction, whose
combiner the op names through its SHARDED_EVAL rule; everything else that is not "the kernel on
the block" (Reshard, Local, a Split gathered axis) is that rule's business, via the helpers here.

The call's types then decide what the result *is* (DESIGN §4.12): a result typed plain or fully
Broadcast is one global array (`run_call` collapses the replicas, which must agree), unless an
argument was a per-device value (a `Local` result), whose plain results stay per device. A
device's share of a split axis is an index set (`values.axis_indices`): a contiguous block for a
canonical layout, a strided set for a Split on an inner factor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator.collectives import Coord, all_reduce
from tilefoundry.evaluator.resharding import local_view, redistribute
from tilefoundry.evaluator.values import (
    EVALUATOR,
    AxisIndex,
    MeshValue,
    as_index,
    axis_indices,
    block_of,
    block_range,
    devices,
    is_replicated_type,
    replicated_value,
    strided_indices,
)
from tilefoundry.ir.core import Op
from tilefoundry.ir.core.nested import flatten
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TupleType, Type
from tilefoundry.ir.types.shard import Mesh, ShardLayout
from tilefoundry.rules import EVAL, SHARDED_EVAL
from tilefoundry.sharding.block_plan import ArgView, Block, BlockPlan, Engine, Kind
from tilefoundry.sharding.mesh_views import refine
from tilefoundry.sharding.shard_reading import AxisSplit, axis_splits


def is_per_device(value: Any) -> bool:
    """A per-device value: each shard is its own value, with no global reading (Local)."""
    return isinstance(value, MeshValue) and (value.per_device or not value.sharded)


def _splits(type_: Type, where: str) -> dict[int, AxisSplit]:
    return axis_splits(type_, where, EVALUATOR, inner_factors=True)


def touches_mesh(args: Sequence[Any], out_type: Type) -> bool:
    """Whether a call must run per device: an argument held per device, or a result that is
    (Split or Partial somewhere). On global arguments, a result typed plain or fully Broadcast
    is the same on every device, so it is computed once."""
    if any(isinstance(leaf, MeshValue) for leaf in flatten(tuple(args))):
        return True
    fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
    return not all(is_replicated_type(f) for f in fields)


class ShardedCall:
    """One call of `op` on evaluator values, run on every device of its mesh.

    `arg_types`/`out_type` are the call's stamped types (their structure is what the sharding
    rules read); `out_shapes` are the concrete global shapes of its tensor results.
    """

    def __init__(
        self,
        op: Op,
        args: Sequence[Any],
        arg_types: Sequence[Type],
        out_type: Type,
        out_shapes: Sequence[tuple[int, ...]],
        mesh: Mesh | None = None,
    ):
        self.op, self.args = op, tuple(args)
        self.arg_types, self.out_type = tuple(arg_types), out_type
        self.out_fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        self.out_shapes = tuple(out_shapes)
        self.where = type(op).__name__
        self.mesh = self._common_mesh(mesh)
        self.coords = devices(self.mesh, self.where)
        self.per_device = any(is_per_device(leaf) for leaf in flatten(self.args))

    def _common_mesh(self, enclosing: Mesh | None) -> Mesh:
        """The one mesh the call's values live on; a part of a call recalled on plain values
        only (one RoPE branch of replicated q next to a split k) runs on its caller's mesh."""
        held = [v.mesh for v in flatten(self.args) if isinstance(v, MeshValue)]
        made = [f.layout.mesh for f in self.out_fields if isinstance(f.layout, ShardLayout)]
        meshes = held + made
        if not meshes and enclosing is not None:
            return enclosing
        if all(m == meshes[0] for m in meshes[1:]):
            return meshes[0]
        # A move between two views of one device set (a Reshard: arguments on one mesh, results
        # on another) is its rule's business: it redistributes through the global value.
        if SHARDED_EVAL.has(type(self.op)) and len(set(held)) == 1 and len(set(made)) == 1:
            refine([held[0], made[0]], self.where, EVALUATOR)  # refuses naming both meshes
            return made[0]
        raise UnsupportedError(
            f"{self.where}: its values live on different meshes; the reference evaluator "
            "runs one call on one mesh (reshard onto a common mesh first)"
        )

    # -- the helpers a SHARDED_EVAL rule composes ------------------------------------------

    def run_blocks(
        self, complete: str | None = None, depends: Sequence[Sequence[int]] | None = None
    ) -> Any:
        """The default execution; `complete` names the combiner (sum, mean, max, min) that
        all-reduces a mesh axis whose Split the op reduces with a complete effect.

        `depends[i]` names the arguments result `i` is computed from (default: all of them).
        An op with independent branches (RoPE's q and k) needs it: a Partial or a partitioned
        dim of one branch's input says nothing about the other branch's result, which every
        device then computes whole.
        """
        return _BlockRun(self, depends).run(complete)

    def recall(
        self,
        args: Sequence[Any],
        arg_types: Sequence[Type],
        out_type: Type,
        out_shapes: Sequence[tuple[int, ...]],
    ) -> ShardedCall:
        """The same op on other arguments, for a rule that runs part of the op on its own (one
        branch of a multi-result op whose branches the domain would otherwise tie together)."""
        return ShardedCall(self.op, args, arg_types, out_type, out_shapes, self.mesh)

    def redistribute(self, value: Any) -> Any:
        """Reshard: `value` moved to the call's result layout (complete, then redistribute)."""
        return redistribute(value, self.out_type, self.where)

    def local(self, value: Any) -> MeshValue:
        """Local: each device's own shard, as a per-device value of the plain result type."""
        return local_view(value, self.out_type, self.where)

    def splits(self, arg_index: int) -> dict[int, tuple[int, ...]]:
        """Logical axis -> the mesh axes splitting it, of argument `arg_index` ({} if unsplit)."""
        value = self.args[arg_index]
        if not (isinstance(value, MeshValue) and value.sharded):
            return {}
        return {axis: s.mesh_axes for axis, s in _splits(value.type, self.where).items()}

    def shard(self, value: Any, coord: Coord) -> Any:
        """What `coord` holds of `value`: its shard, or the value itself when it is global."""
        return _local(value, coord)

    def block(self, coord: Coord, arg_index: int | None = None) -> tuple:
        """The numpy index of `coord`'s share of argument `arg_index`, or of the (single)
        result when None (slices for blocks, an outer index for strided shares); a value no
        mesh axis splits is one whole block."""
        if arg_index is None:
            type_, shape = self.out_fields[0], self.out_shapes[0]
        else:
            value = self.args[arg_index]
            type_, shape = getattr(value, "type", None), tuple(np.shape(value))
            if isinstance(value, MeshValue):
                shape = value.shape
        if not _is_sharded(type_):
            return tuple(slice(None) for _ in shape)
        return block_of(type_, shape, coord, self.where)

    def block_range(self, arg_index: int, logical_axis: int, coord: Coord) -> tuple[int, int]:
        """The global [start, stop) of `coord`'s shard of argument `arg_index` on that axis; a
        Split on an inner factor holds no range (a rule that needs one reads `indices`)."""
        held = self.indices(arg_index, logical_axis, coord)
        start = int(held[0]) if held.size else 0
        if held.size and int(held[-1]) - start + 1 != held.size:
            raise UnsupportedError(
                f"{self.where}: argument {arg_index} is split on an inner factor of its axis "
                f"{logical_axis}, so a device holds a strided set of it, not a block; the op's "
                "SHARDED_EVAL rule must read call.indices(...) instead of call.block_range(...)"
            )
        return start, start + int(held.size)

    def indices(self, arg_index: int, logical_axis: int, coord: Coord) -> np.ndarray:
        """The sorted global indices of `coord`'s shard of argument `arg_index` on that axis (a
        range for a canonical split, a strided set for a Split on an inner factor)."""
        value = self.args[arg_index]
        if isinstance(value, MeshValue):
            extent = value.shape[logical_axis]
            if value.sharded:
                held = axis_indices(value.type, value.shape, coord, self.where)[logical_axis]
                return np.arange(extent)[held]
            return np.arange(extent)
        return np.arange(int(np.shape(value)[logical_axis]))

    def aligned(
        self,
        value: Any,
        coord: Coord,
        axes: Sequence[int | None],
        own: frozenset[int] = frozenset(),
        independent_of: frozenset[int] = frozenset(),
    ) -> np.ndarray:
        """`coord`'s share of the argument `value` on the blocks of the (single) result.

        Axis `j` of `value` runs along result axis `axes[j]` (None: an axis the result does not
        have, which must not be split). Where the result is Split and `value` is replicated, the
        device slices its replica to its block (no communication); where both are split the same
        way the shard is the block already; any other pairing has no block reading and fails
        closed. Axes in `own` keep the device's own shard as it is: the rule itself says what a
        Split there means (Gather's gathered axis). A Partial is an addend, used as it is. A
        split result axis `value` has no axis for fails closed, unless it is in
        `independent_of`: every block of it reads `value` whole (ScatterAdd's indices do not
        vary along the columns they write).
        """
        out_type, out_shape = self.out_fields[0], self.out_shapes[0]
        out_splits = _splits(out_type, self.where)
        if is_per_device(value):
            if out_splits:
                raise UnsupportedError(
                    f"{self.where}: a per-device (Local) value cannot be aligned with a split "
                    "result; reshard the sharded value instead"
                )
            return value.shards[coord]
        held = {}
        if isinstance(value, MeshValue):
            held = _splits(value.type, self.where)
        wanted = axis_indices(out_type, out_shape, coord, self.where) if out_splits else ()
        index: list[AxisIndex] = []
        for axis, out_axis in enumerate(axes):
            have = held.get(axis)
            want = out_splits.get(out_axis) if out_axis is not None else None
            if axis in own or have == want:
                index.append(slice(None))
                continue
            if have is not None:
                shown = f"result axis {out_axis}" if out_axis is not None else "no result axis"
                raise UnsupportedError(
                    f"{self.where}: an argument split on its axis {axis} (over "
                    f"{', '.join(self.mesh.axes[a].label for a in have.mesh_axes)}) runs along "
                    f"{shown}, which is not split the same way, so its shard is no block of the "
                    "result; reshard that argument to the result's layout first"
                )
            index.append(wanted[out_axis])
        covered = {a for a in axes if a is not None} | independent_of
        uncovered = sorted(set(out_splits) - covered)
        if uncovered:
            raise UnsupportedError(
                f"{self.where}: the result is split on axis {uncovered[0]}, along which an "
                "argument has no axis, so no device's block of it can be read from that argument"
            )
        array = np.asarray(_local(value, coord))
        return array[as_index(tuple(index), array.shape)]

    def map_devices(self, fn: Callable[[Coord, tuple], Any]) -> Any:
        """`fn(coord, local_args)` on each device's own shards (replicated values whole); what
        it returns is read through the call's result type as that device's shard."""
        results = {c: fn(c, tuple(_local(a, c) for a in self.args)) for c in self.coords}
        return self.wrap(results)

    def wrap(self, results: dict[Coord, Any]) -> Any:
        """Per-device results (a tuple per device for a tuple result) as evaluator values."""
        values = []
        for index, field in enumerate(self.out_fields):
            shards = {
                c: np.asarray(r[index] if isinstance(self.out_type, TupleType) else r)
                for c, r in results.items()
            }
            per_device = self.per_device and not _is_sharded(field)
            values.append(MeshValue(self.mesh, field, self.out_shapes[index], shards, per_device))
        return tuple(values) if isinstance(self.out_type, TupleType) else values[0]


def _is_sharded(type_: Type) -> bool:
    return isinstance(getattr(type_, "layout", None), ShardLayout)


def _local(value: Any, coord: Coord) -> Any:
    if isinstance(value, MeshValue):
        return value.shards[coord]
    if isinstance(value, tuple):
        return tuple(_local(v, coord) for v in value)
    return value


def run_call(call: ShardedCall) -> Any:
    """The op's SHARDED_EVAL rule when it has one, else the default block execution; what it
    returns is then held as its type says (`as_typed`)."""
    op_class = type(call.op)
    if SHARDED_EVAL.has(op_class):
        result = SHARDED_EVAL.lookup(op_class)(call.op, call.args, call)
    else:
        result = call.run_blocks()
    return as_typed(result, call.where)


def as_typed(value: Any, where: str) -> Any:
    """`value` held as its type says (DESIGN §4.12): a MeshValue typed plain or fully Broadcast
    is one replicated global value, so its replicas collapse to one array; only a per-device
    value (a Local result, or one computed from it) stays per device."""
    if isinstance(value, tuple):
        return tuple(as_typed(v, where) for v in value)
    if isinstance(value, MeshValue) and not value.per_device and is_replicated_type(value.type):
        return replicated_value(value, where)
    return value


def _view(value: Any) -> ArgView:
    if isinstance(value, tuple):
        sharded = any(isinstance(v, MeshValue) and v.sharded for v in flatten(value))
        return ArgView(Kind.SHARDED_TUPLE if sharded else Kind.TUPLE)
    if not isinstance(value, MeshValue):
        return ArgView(Kind.GLOBAL)
    if is_per_device(value):
        return ArgView(Kind.LOCAL)
    return ArgView(Kind.SHARDED, value.type, value.shape)


_ENGINE = Engine(
    name=EVALUATOR,
    rule="SHARDED_EVAL",
    article="a",
    combiners=("sum", "mean", "max", "min"),
    label=mesh_axis_label,
    inner_factors=True,
)


class _BlockRun:
    """The default execution of one call: the call's block plan, carried out on numpy arrays
    (slice each device's inputs, run the kernel, all-reduce and cut as the plan settles)."""

    def __init__(self, call: ShardedCall, depends: Sequence[Sequence[int]] | None = None):
        self.call = call
        views = tuple(_view(a) for a in call.args)
        self.plan = BlockPlan(
            call.op,
            call.arg_types,
            views,
            call.out_type,
            call.out_shapes,
            call.mesh,
            _ENGINE,
            depends,
        )

    def _slice_input(self, index: int, value: Any, coord: Coord) -> Any:
        """Argument `index` restricted to `coord`'s block of the partitioned dims."""
        cuts = self.plan.input_cuts(index)
        array = _local(value, coord)
        if cuts is None:
            return array
        array = np.asarray(array)
        index_expr: list[AxisIndex] = [slice(None)] * array.ndim
        for axis, block in cuts.items():
            index_expr[axis] = self._block_index(block, coord)
        return array[as_index(tuple(index_expr), array.shape)]

    def _block_index(self, block: Block, coord: Coord) -> AxisIndex:
        """`coord`'s indices of a partitioned dim: a block, or a strided set (inner factors)."""
        mesh, where = self.call.mesh, self.call.where
        if block.split is None:
            return slice(*block_range(block.extent, mesh, block.mesh_axes, coord, where))
        return strided_indices(block.extent, mesh, block.split, coord, where)

    def run(self, complete: str | None) -> Any:
        call, kernel = self.call, EVAL.lookup(type(self.call.op))
        local_out = self.plan.local_out_type()
        results = {}
        for coord in call.coords:
            local_args = tuple(self._slice_input(i, a, coord) for i, a in enumerate(call.args))
            results[coord] = kernel(call.op, local_args, local_out)
        values = call.wrap(results)
        leaves = values if isinstance(values, tuple) else (values,)
        finished = tuple(self._settle(i, leaf, complete) for i, leaf in enumerate(leaves))
        return finished if isinstance(values, tuple) else finished[0]

    def _settle(self, index: int, value: MeshValue, complete: str | None) -> MeshValue:
        """Result `index` completed and cut as the plan says its type requires."""
        settlement = self.plan.settle(index, complete)
        shards = value.shards
        for mesh_axis in settlement.reduce:
            shards = all_reduce(shards, mesh_axis, complete, self.call.where)
        for axis, mesh_axes in settlement.cuts.items():
            shards = self._keep_block(index, shards, axis, mesh_axes)
        return MeshValue(value.mesh, value.type, value.shape, shards, value.per_device)

    def _keep_block(self, index: int, shards: dict, axis: int, mesh_axes: tuple[int, ...]) -> dict:
        """A result replicated along `mesh_axes` but typed Split there (e.g. a creation op):
        every device computed it whole and keeps just its own share, which is exact."""
        call = self.call
        field, shape = call.out_fields[index], call.out_shapes[index]
        kept = {}
        for coord, shard in shards.items():
            cut: list[AxisIndex] = [slice(None)] * shard.ndim
            cut[axis] = axis_indices(field, shape, coord, call.where)[axis]
            kept[coord] = shard[as_index(tuple(cut), shard.shape)]
        return kept
