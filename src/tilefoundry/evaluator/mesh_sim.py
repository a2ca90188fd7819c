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

    def run_blocks(self, complete: str | None = None) -> Any:
        """The default execution; `complete` names the combiner (sum, mean, max, min) that
        all-reduces a mesh axis whose Split the op reduces with a complete effect."""
        return _BlockRun(self).run(complete)

    def redistribute(self, value: Any) -> Any:
        """Reshard: `value` moved to the call's result layout (complete, then redistribute)."""
        return redistribute(value, self.out_type, self.where)

    def local(self, value: Any) -> MeshValue:
        """Local: each device's own shard, as a per-device value of the plain result type."""
        return local_view(value, self.out_type, self.where)

    def block_range(self, arg_index: int, logical_axis: int, coord: Coord) -> tuple[int, int]:
        """The global [start, stop) of `coord`'s shard of argument `arg_index` on that axis."""
        value = self.args[arg_index]
        if not (isinstance(value, MeshValue) and value.sharded):
            return 0, int(np.shape(value)[logical_axis])
        axes = split_axes(value.type, self.where).get(logical_axis)
        if axes is None:
            return 0, value.shape[logical_axis]
        return block_range(value.shape[logical_axis], self.mesh, axes, coord, self.where)

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

    def __init__(self, call: ShardedCall):
        self.call = call
        self.where = call.where
        self.relations = relations_for(call.op, call.arg_types)
        self.partition: dict[int, tuple[tuple[int, ...], int]] = {}
        self.partial_axes: set[int] = set()
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
        self.partial_axes |= {m for m, a in enumerate(layout.attrs) if isinstance(a, Partial)}
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

    def _split_dim_of(self, mesh_axis: int) -> int | None:
        for dim, (mesh_axes, _) in self.partition.items():
            if mesh_axis in mesh_axes:
                return dim
        return None

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
        shards, cut = value.shards, set()
        for mesh_axis in range(self.call.mesh.rank):
            attr = attrs[mesh_axis] if attrs is not None else None
            dim = self._split_dim_of(mesh_axis)
            read_at = [j for j, a in enumerate(out_axes) if dim is not None and dim in a.dims]
            label = mesh_label(self.call.mesh, mesh_axis)
            if isinstance(attr, Split):
                out_axis = next(j for j, m in out_splits.items() if mesh_axis in m)
                if dim is None and mesh_axis not in self.partial_axes:
                    if out_axis not in cut:
                        shards = self._keep_block(index, shards, out_axis, out_splits[out_axis])
                        cut.add(out_axis)
                elif read_at != [out_axis] or out_splits[out_axis] != self.partition[dim][0]:
                    self._mismatch(label, f"Split on logical axis {out_axis}")
            elif isinstance(attr, Partial):
                if dim is None and mesh_axis not in self.partial_axes:
                    self._mismatch(label, f"Partial({attr.reduction}) with no per-device addends")
                if dim is not None and read_at:
                    self._mismatch(label, f"Partial({attr.reduction})")
            elif mesh_axis in self.partial_axes:
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
