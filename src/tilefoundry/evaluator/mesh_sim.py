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
    MeshValue,
    block_range,
    block_slices,
    devices,
)
from tilefoundry.ir.core import Op
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TupleType, Type
from tilefoundry.ir.types.shard import Mesh, ShardLayout
from tilefoundry.visitor_registry import EVAL, SHARDED_EVAL
from tilefoundry.visitor_registry.block_plan import ArgView, BlockPlan, Engine, Kind
from tilefoundry.visitor_registry.mesh_views import refine
from tilefoundry.visitor_registry.shard_reading import canonical_splits


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def touches_mesh(args: Sequence[Any], out_type: Type) -> bool:
    """Whether a call must run per device: a per-device argument, or a sharded result."""
    if any(isinstance(leaf, MeshValue) for leaf in _leaves(tuple(args))):
        return True
    fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
    return any(isinstance(getattr(f, "layout", None), ShardLayout) for f in fields)


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
    ):
        self.op, self.args = op, tuple(args)
        self.arg_types, self.out_type = tuple(arg_types), out_type
        self.out_fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        self.out_shapes = tuple(out_shapes)
        self.where = type(op).__name__
        self.mesh = self._common_mesh()
        self.coords = devices(self.mesh)

    def _common_mesh(self) -> Mesh:
        held = [v.mesh for v in _leaves(self.args) if isinstance(v, MeshValue)]
        made = [f.layout.mesh for f in self.out_fields if isinstance(f.layout, ShardLayout)]
        meshes = held + made
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
        return ShardedCall(self.op, args, arg_types, out_type, out_shapes)

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
        return canonical_splits(value.type, self.where, EVALUATOR)

    def shard(self, value: Any, coord: Coord) -> Any:
        """What `coord` holds of `value`: its shard, or the value itself when it is global."""
        return _local(value, coord)

    def block(self, coord: Coord, arg_index: int | None = None) -> tuple[slice, ...]:
        """The global index of `coord`'s block of argument `arg_index`, or of the (single)
        result when None; a value no mesh axis splits is one whole block."""
        if arg_index is None:
            type_, shape = self.out_fields[0], self.out_shapes[0]
        else:
            value = self.args[arg_index]
            type_, shape = getattr(value, "type", None), tuple(np.shape(value))
            if isinstance(value, MeshValue):
                shape = value.shape
        if not _is_sharded(type_):
            return tuple(slice(None) for _ in shape)
        return block_slices(type_, shape, coord, self.where)

    def block_range(self, arg_index: int, logical_axis: int, coord: Coord) -> tuple[int, int]:
        """The global [start, stop) of `coord`'s shard of argument `arg_index` on that axis."""
        value = self.args[arg_index]
        if not (isinstance(value, MeshValue) and value.sharded):
            return 0, int(np.shape(value)[logical_axis])
        axes = canonical_splits(value.type, self.where, EVALUATOR).get(logical_axis)
        if axes is None:
            return 0, value.shape[logical_axis]
        return block_range(value.shape[logical_axis], self.mesh, axes, coord, self.where)

    def aligned(
        self,
        value: Any,
        coord: Coord,
        axes: Sequence[int | None],
        own: frozenset[int] = frozenset(),
    ) -> np.ndarray:
        """`coord`'s share of the argument `value` on the blocks of the (single) result.

        Axis `j` of `value` runs along result axis `axes[j]` (None: an axis the result does not
        have, which must not be split). Where the result is Split and `value` is replicated, the
        device slices its replica to its block (no communication); where both are split the same
        way the shard is the block already; any other pairing has no block reading and fails
        closed. Axes in `own` keep the device's own shard as it is: the rule itself says what a
        Split there means (Gather's gathered axis). A Partial is an addend, used as it is.
        """
        out_type, out_shape = self.out_fields[0], self.out_shapes[0]
        out_splits = canonical_splits(out_type, self.where, EVALUATOR)
        if isinstance(value, MeshValue) and not value.sharded:
            if out_splits:
                raise UnsupportedError(
                    f"{self.where}: a per-device (Local) value cannot be aligned with a split "
                    "result; reshard the sharded value instead"
                )
            return value.shards[coord]
        held = {}
        if isinstance(value, MeshValue):
            held = canonical_splits(value.type, self.where, EVALUATOR)
        index: list[slice] = []
        for axis, out_axis in enumerate(axes):
            have = held.get(axis, ())
            want = out_splits.get(out_axis, ()) if out_axis is not None else ()
            if axis in own or have == want:
                index.append(slice(None))
                continue
            if have:
                shown = f"result axis {out_axis}" if out_axis is not None else "no result axis"
                raise UnsupportedError(
                    f"{self.where}: an argument split on its axis {axis} (over "
                    f"{', '.join(self.mesh.axes[a].label for a in have)}) runs along {shown}, "
                    "which is not split the same way, so its shard is no block of the result; "
                    "reshard that argument to the result's layout first"
                )
            start, stop = block_range(out_shape[out_axis], self.mesh, want, coord, self.where)
            index.append(slice(start, stop))
        uncovered = sorted(set(out_splits) - {a for a in axes if a is not None})
        if uncovered:
            raise UnsupportedError(
                f"{self.where}: the result is split on axis {uncovered[0]}, along which an "
                "argument has no axis, so no device's block of it can be read from that argument"
            )
        return np.asarray(_local(value, coord))[tuple(index)]

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
            values.append(MeshValue(self.mesh, field, self.out_shapes[index], shards))
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
    """The op's SHARDED_EVAL rule when it has one, else the default block execution."""
    op_class = type(call.op)
    if SHARDED_EVAL.has(op_class):
        return SHARDED_EVAL.lookup(op_class)(call.op, call.args, call)
    return call.run_blocks()


def _view(value: Any) -> ArgView:
    if isinstance(value, tuple):
        sharded = any(isinstance(v, MeshValue) and v.sharded for v in _leaves(value))
        return ArgView(Kind.SHARDED_TUPLE if sharded else Kind.TUPLE)
    if not isinstance(value, MeshValue):
        return ArgView(Kind.GLOBAL)
    if not value.sharded:
        return ArgView(Kind.LOCAL)
    return ArgView(Kind.SHARDED, value.type, value.shape)


_ENGINE = Engine(
    name=EVALUATOR,
    rule="SHARDED_EVAL",
    article="a",
    combiners=("sum", "mean", "max", "min"),
    label=mesh_axis_label,
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
        index_expr = [slice(None)] * np.ndim(array)
        for axis, (mesh_axes, extent) in cuts.items():
            start, stop = block_range(extent, self.call.mesh, mesh_axes, coord, self.call.where)
            index_expr[axis] = slice(start, stop)
        return np.asarray(array)[tuple(index_expr)]

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
            shards = all_reduce(shards, mesh_axis, complete)
        for axis, mesh_axes in settlement.cuts.items():
            shards = self._keep_block(index, shards, axis, mesh_axes)
        return MeshValue(value.mesh, value.type, value.shape, shards)

    def _keep_block(self, index: int, shards: dict, axis: int, mesh_axes: tuple[int, ...]) -> dict:
        """A result replicated along `mesh_axes` but typed Split there (e.g. a creation op):
        every device computed it whole and keeps just its own block, which is exact."""
        extent = self.call.out_shapes[index][axis]
        kept = {}
        for coord, shard in shards.items():
            start, stop = block_range(extent, self.call.mesh, mesh_axes, coord, self.call.where)
            cut = [slice(None)] * shard.ndim
            cut[axis] = slice(start, stop)
            kept[coord] = shard[tuple(cut)]
        return kept
