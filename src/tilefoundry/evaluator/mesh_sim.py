"""Per-device execution of one op call over a mesh (DESIGN §4.12).

Per device, an op computes its block of the iteration domain: the domain dims that input Splits
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
from tilefoundry.evaluator.access import WholeAxis, axis_accesses, relations_for
from tilefoundry.evaluator.collectives import Coord, all_reduce
from tilefoundry.evaluator.resharding import local_view, redistribute
from tilefoundry.evaluator.values import (
    MeshValue,
    block_range,
    block_slices,
    devices,
    mesh_label,
    split_axes,
)
from tilefoundry.ir.core import Op
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import Mesh, Partial, ShardLayout, Split
from tilefoundry.visitor_registry import EVAL, SHARDED_EVAL
from tilefoundry.visitor_registry.access_structure import Projection


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
        meshes = [v.mesh for v in _leaves(self.args) if isinstance(v, MeshValue)]
        meshes += [f.layout.mesh for f in self.out_fields if isinstance(f.layout, ShardLayout)]
        if any(m != meshes[0] for m in meshes[1:]):
            raise UnsupportedError(
                f"{self.where}: its values live on different meshes; the reference evaluator "
                "runs one call on one mesh (reshard onto a common mesh first)"
            )
        return meshes[0]

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
        return split_axes(value.type, self.where)

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
        axes = split_axes(value.type, self.where).get(logical_axis)
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
        out_splits = split_axes(out_type, self.where) if _is_sharded(out_type) else {}
        if isinstance(value, MeshValue) and not value.sharded:
            if out_splits:
                raise UnsupportedError(
                    f"{self.where}: a per-device (Local) value cannot be aligned with a split "
                    "result; reshard the sharded value instead"
                )
            return value.shards[coord]
        held = split_axes(value.type, self.where) if isinstance(value, MeshValue) else {}
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
                    f"{', '.join(mesh_label(self.mesh, a) for a in have)}) runs along {shown}, "
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


class _BlockRun:
    """The default execution of one call: partition, slice, run the kernel, check, complete."""

    def __init__(self, call: ShardedCall, depends: Sequence[Sequence[int]] | None = None):
        self.call = call
        self.where = call.where
        self.relations = relations_for(call.op, call.arg_types)
        self.partition: dict[int, tuple[tuple[int, ...], int]] = {}
        self.partials_of: dict[int, set[int]] = {}
        every = tuple(range(len(call.args)))
        self.depends = tuple(depends) if depends is not None else (every,) * len(call.out_fields)
        for index, value in enumerate(call.args):
            self._collect(index, value)

    def _input_axes(self, index: int) -> tuple:
        return axis_accesses(self.relations.inputs[index].pattern)

    def _collect(self, index: int, value: Any) -> None:
        """Bind each Split of argument `index` to the domain dim its projection reads."""
        if isinstance(value, tuple):
            if any(isinstance(v, MeshValue) and v.sharded for v in _leaves(value)):
                self._refuse_split(f"argument {index} is a tuple holding sharded values")
            return
        if not (isinstance(value, MeshValue) and value.sharded):
            return
        layout = value.type.layout
        self.partials_of[index] = {m for m, a in enumerate(layout.attrs) if isinstance(a, Partial)}
        splits = split_axes(value.type, self.where)
        if splits and self.relations is None:
            self._refuse_split(f"argument {index} is Split and the op has no access relation")
        for logical_axis, mesh_axes in splits.items():
            access = self._input_axes(index)[logical_axis]
            if not isinstance(access, Projection):
                labels = ", ".join(mesh_label(self.call.mesh, a) for a in mesh_axes)
                raise UnsupportedError(
                    f"{self.where}: argument {index} is Split on {labels} along logical axis "
                    f"{logical_axis}, which the op reads as {access}; the reference evaluator "
                    "partitions only dims read through a plain projection; insert "
                    "reshard(x, Broadcast) on that argument first"
                )
            entry = (mesh_axes, value.shape[logical_axis])
            if self.partition.setdefault(access.dim, entry) != entry:
                raise UnsupportedError(
                    f"{self.where}: two arguments split domain dim {access.dim} differently "
                    f"({self.partition[access.dim]} vs {entry}); reshard one of them first"
                )

    def _refuse_split(self, why: str) -> None:
        raise UnsupportedError(
            f"{self.where}: {why}, so the reference evaluator cannot tell which block each "
            "device computes; the op needs a SHARDED_EVAL rule, or insert reshard(x, Broadcast)"
        )

    def _split_dim_of(self, mesh_axis: int, relevant: set[int]) -> int | None:
        for dim, (mesh_axes, _) in self.partition.items():
            if mesh_axis in mesh_axes and dim in relevant:
                return dim
        return None

    def _relevant_dims(self, index: int) -> set[int]:
        """The partitioned dims result `index` sees: read by an argument it is computed from, or
        written by it. Every device computes a result whole along any other partitioned dim."""
        dims = {d for a in self._output_axes(index) for d in a.dims}
        for arg in self.depends[index]:
            if self.relations is not None and not isinstance(self.call.args[arg], tuple):
                dims |= {d for a in self._input_axes(arg) for d in a.dims}
        return dims & set(self.partition)

    def _range(self, dim: int, coord: Coord) -> tuple[int, int]:
        mesh_axes, extent = self.partition[dim]
        return block_range(extent, self.call.mesh, mesh_axes, coord, self.where)

    def _slice_input(self, index: int, value: Any, coord: Coord) -> Any:
        """Argument `index` restricted to `coord`'s block of the partitioned dims."""
        if isinstance(value, tuple) or not self.partition:
            return _local(value, coord)
        if isinstance(value, MeshValue) and not value.sharded:
            self._refuse_split(f"argument {index} is a per-device (Local) value")
        array = _local(value, coord)
        held = split_axes(value.type, self.where) if isinstance(value, MeshValue) else {}
        index_expr: list[slice] = []
        for axis, access in enumerate(self._input_axes(index)):
            touched = [d for d in access.dims if d in self.partition]
            if axis in held or not touched:
                index_expr.append(slice(None))
                continue
            if not isinstance(access, Projection):
                raise UnsupportedError(
                    f"{self.where}: argument {index} reads partitioned domain dim {touched[0]} "
                    f"on axis {axis} as {access}; a replicated input can be sliced to a device's "
                    "block only along a plain projection; reshard the split input to Broadcast"
                )
            start, stop = self._range(access.dim, coord)
            index_expr.append(slice(start, stop))
        return np.asarray(array)[tuple(index_expr)]

    def _output_axes(self, index: int) -> tuple:
        if self.relations is None:
            return tuple(WholeAxis() for _ in self.call.out_shapes[index])
        return axis_accesses(self.relations.outputs[index].pattern)

    def _local_out_type(self) -> Type:
        fields = []
        for index, field in enumerate(self.call.out_fields):
            shape = list(self.call.out_shapes[index])
            for axis, access in enumerate(self._output_axes(index)):
                touched = [d for d in access.dims if d in self.partition]
                if not touched:
                    continue
                if not isinstance(access, Projection):
                    raise UnsupportedError(
                        f"{self.where}: result {index} writes partitioned domain dim "
                        f"{touched[0]} on axis {axis} as {access}, not a plain projection; "
                        "insert reshard(x, Broadcast) on the split input first"
                    )
                mesh_axes, extent = self.partition[access.dim]
                shape[axis] = extent // int(np.prod([self.call.mesh.shape[a] for a in mesh_axes]))
            fields.append(TensorType(tuple(shape), field.dtype, None, field.storage))
        if isinstance(self.call.out_type, TupleType):
            return TupleType(tuple(fields))
        return fields[0]

    def run(self, complete: str | None) -> Any:
        call, kernel = self.call, EVAL.lookup(type(self.call.op))
        local_out = self._local_out_type()
        results = {}
        for coord in call.coords:
            local_args = tuple(self._slice_input(i, a, coord) for i, a in enumerate(call.args))
            results[coord] = kernel(call.op, local_args, local_out)
        values = call.wrap(results)
        leaves = values if isinstance(values, tuple) else (values,)
        finished = tuple(self._settle(i, leaf, complete) for i, leaf in enumerate(leaves))
        return finished if isinstance(values, tuple) else finished[0]

    def _settle(self, index: int, value: MeshValue, complete: str | None) -> MeshValue:
        """Check each mesh axis of result `index` against its type; complete or cut as it says."""
        field = value.type
        attrs = field.layout.attrs if isinstance(field.layout, ShardLayout) else None
        out_splits = split_axes(field, self.where) if attrs is not None else {}
        out_axes = self._output_axes(index)
        relevant = self._relevant_dims(index)
        partial_axes = set().union(*(self.partials_of.get(a, set()) for a in self.depends[index]))
        shards, cut = value.shards, set()
        for mesh_axis in range(self.call.mesh.rank):
            attr = attrs[mesh_axis] if attrs is not None else None
            dim = self._split_dim_of(mesh_axis, relevant)
            read_at = [j for j, a in enumerate(out_axes) if dim is not None and dim in a.dims]
            label = mesh_label(self.call.mesh, mesh_axis)
            if isinstance(attr, Split):
                out_axis = next(j for j, m in out_splits.items() if mesh_axis in m)
                if dim is None and mesh_axis not in partial_axes:
                    if out_axis not in cut:
                        shards = self._keep_block(index, shards, out_axis, out_splits[out_axis])
                        cut.add(out_axis)
                elif read_at != [out_axis] or out_splits[out_axis] != self.partition[dim][0]:
                    self._mismatch(label, f"Split on logical axis {out_axis}")
            elif isinstance(attr, Partial):
                if dim is None and mesh_axis not in partial_axes:
                    self._mismatch(label, f"Partial({attr.reduction}) with no per-device addends")
                if dim is not None and read_at:
                    self._mismatch(label, f"Partial({attr.reduction})")
            elif mesh_axis in partial_axes:
                self._mismatch(label, "complete (only a Reshard completes a Partial)")
            elif dim is not None:
                if read_at:
                    self._mismatch(label, "replicated")
                if complete is None:
                    raise UnsupportedError(
                        f"{self.where}: reduces the dim split on {label} to a replicated result "
                        "(a complete effect), but names no combiner; its SHARDED_EVAL rule must "
                        "call run_blocks(complete='sum'|'mean'|'max'|'min')"
                    )
                shards = all_reduce(shards, mesh_axis, complete)
        return MeshValue(value.mesh, field, value.shape, shards)

    def _keep_block(self, index: int, shards: dict, axis: int, mesh_axes: tuple[int, ...]) -> dict:
        """A result replicated along `mesh_axes` but typed Split there (e.g. a creation op):
        every device computed it whole and keeps just its own block, which is exact."""
        extent = self.call.out_shapes[index][axis]
        kept = {}
        for coord, shard in shards.items():
            if shard.shape[axis] != extent:
                self._mismatch(mesh_label(self.call.mesh, mesh_axes[0]), "Split")
            start, stop = block_range(extent, self.call.mesh, mesh_axes, coord, self.where)
            cut = [slice(None)] * shard.ndim
            cut[axis] = slice(start, stop)
            kept[coord] = shard[tuple(cut)]
        return kept

    def _mismatch(self, label: str, declared: str) -> None:
        raise UnsupportedError(
            f"{self.where}: its result type is {declared} on {label}, which running the kernel "
            "on each device's block does not produce; the op needs a SHARDED_EVAL rule for "
            "this sharding (or the typeinfer rule that derived it is unsound)"
        )
