"""One op call of the per-device program: the evaluator's mesh semantics, written as StableHLO.

This mirrors the reference evaluator's `_BlockRun` (DESIGN §4.12) step for step, so the SPMD
exit computes what the mesh simulation computes: the domain dims that input Splits bind to mesh
axes are partitioned; a replicated operand is cut locally to the device's block along the plain
projection that reads a partitioned dim (a `dynamic_slice` by device coordinate, never a
collective); the op's ordinary StableHLO rule runs on the LOCAL operand and result types; then each
mesh axis of each result is settled against its type: a Split result computed whole keeps its
block, a reduced Split whose result is replicated is all-reduced with the combiner the op's
SPMD_LOWERING rule names (the complete effect), and every other mismatch fails closed. Reshard
and Local are what their SPMD_LOWERING rules make of `reshard` and `local` here.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from tilefoundry.errors import InternalCompilerError, UnsupportedError
from tilefoundry.evaluator.access import WholeAxis, axis_accesses, relations_for
from tilefoundry.exits.lowering_values import Value
from tilefoundry.exits.spmd_collectives import DeviceBody, Shard
from tilefoundry.exits.spmd_mesh import logical_splits, partial_axes
from tilefoundry.ir.core import Op
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import Partial, ShardLayout, Split
from tilefoundry.visitor_registry import STABLEHLO
from tilefoundry.visitor_registry.access_structure import Projection

Operand = Shard | tuple["Operand", ...]


def leaves(value: Any) -> list[Shard]:
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in leaves(item)]
    return [value]


def _names(value: Operand) -> Any:
    return tuple(_names(v) for v in value) if isinstance(value, tuple) else value.name


def _local_types(value: Operand) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(_local_types(v) for v in value))
    return value.local


class SpmdCall:
    """One call of `op` on per-device operands; `out_shapes` are its concrete global shapes."""

    def __init__(
        self,
        op: Op,
        operands: Sequence[Operand],
        out_type: Type,
        out_shapes: Sequence[tuple[int, ...]],
        body: DeviceBody,
    ):
        self.op, self.operands = op, tuple(operands)
        self.out_type = out_type
        self.out_fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        self.out_shapes = tuple(out_shapes)
        self.body, self.lw = body, body.lw
        self.where = type(op).__name__
        self.arg_types = tuple(_ir_types(v) for v in self.operands)

    # ---- the helpers an SPMD_LOWERING rule composes --------------------------------------

    def run_blocks(self, complete: str | None = None, local_op: Op | None = None) -> Operand:
        """The default lowering; `complete` names the combiner (sum, max, min) that all-reduces
        a mesh axis whose Split the op reduces to a replicated result, and `local_op` (same
        operands and result shape) replaces the op on each device's block. A mean completes as
        a sum its rule divides, so that every device divides once by the global count."""
        return _Blocks(self).run(complete, local_op or self.op)

    def completes(self) -> bool:
        """Whether the op reduces a split dim to a replicated result (run_blocks all-reduces)."""
        return bool(_Blocks(self).completed_axes())

    def reshard(self, x: Shard) -> Shard:
        from tilefoundry.exits.spmd_reshard import reshard

        return reshard(x, self.out_type, self.body, self.where)

    def local(self, x: Shard) -> Shard:
        """Each device's own block as a per-device value of the plain result type."""
        if not isinstance(x.type.layout, ShardLayout) or x.per_device:
            raise UnsupportedError(f"{self.where}: needs a sharded value; this one has none")
        return Shard(x.name, self.out_type, x.local, per_device=True)

    def value(self, x: Shard) -> Value:
        """`x`'s local array for the Value formulas of `lowering_values`."""
        return Value.of(self.lw, x.name, x.local)


def _ir_types(value: Operand) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(_ir_types(v) for v in value))
    return value.type


class _Blocks:
    """The default lowering of one call: partition, cut, run the rule, settle."""

    def __init__(self, call: SpmdCall):
        self.call, self.where = call, call.where
        self.mesh = call.body.mesh
        sharded = any(isinstance(leaf.type.layout, ShardLayout) for leaf in leaves(call.operands))
        # Plain operands need no access map (the op runs whole on every device).
        self.relations = relations_for(call.op, call.arg_types) if sharded else None
        self.partition: dict[int, tuple[tuple[int, ...], int]] = {}
        self.partial_axes: set[int] = set()
        for index, value in enumerate(call.operands):
            self._collect(index, value)

    def _input_axes(self, index: int) -> tuple:
        return axis_accesses(self.relations.inputs[index].pattern)

    def _collect(self, index: int, value: Operand) -> None:
        if isinstance(value, tuple):
            if any(isinstance(leaf.type.layout, ShardLayout) for leaf in leaves(value)):
                self._refuse(f"argument {index} is a tuple holding sharded values")
            return
        if not isinstance(value.type.layout, ShardLayout):
            return
        self.partial_axes |= set(partial_axes(value.type))
        splits = logical_splits(value.type, self.where)
        if splits and self.relations is None:
            self._refuse(f"argument {index} is Split and the op has no access relation")
        for logical_axis, mesh_axes in splits.items():
            access = self._input_axes(index)[logical_axis]
            if not isinstance(access, Projection):
                raise UnsupportedError(
                    f"{self.where}: argument {index} is Split along logical axis {logical_axis}, "
                    f"which the op reads as {access}; only dims read through a plain projection "
                    "can be partitioned; insert reshard(x, Broadcast) on that argument first"
                )
            extent = self.call.lw.shape(value.type)[logical_axis]
            entry = (mesh_axes, extent)
            if self.partition.setdefault(access.dim, entry) != entry:
                raise UnsupportedError(
                    f"{self.where}: two arguments split domain dim {access.dim} differently "
                    f"({self.partition[access.dim]} vs {entry}); reshard one of them first"
                )

    def _refuse(self, why: str) -> None:
        raise UnsupportedError(
            f"{self.where}: {why}, so the SPMD exit cannot tell which block each device "
            "computes; the op needs an SPMD_LOWERING rule, or insert reshard(x, Broadcast)"
        )

    def _split_dim_of(self, mesh_axis: int) -> int | None:
        for dim, (mesh_axes, _) in self.partition.items():
            if mesh_axis in mesh_axes:
                return dim
        return None

    def _cut_input(self, index: int, value: Operand) -> Operand:
        """Argument `index` restricted to this device's block of the partitioned dims."""
        if isinstance(value, tuple) or not self.partition:
            return value
        if value.per_device:
            self._refuse(f"argument {index} is a per-device (Local) value")
        held = logical_splits(value.type, self.where)
        cuts: dict[int, tuple[int, ...]] = {}
        for axis, access in enumerate(self._input_axes(index)):
            touched = [d for d in access.dims if d in self.partition]
            if axis in held or not touched:
                continue
            if not isinstance(access, Projection):
                raise UnsupportedError(
                    f"{self.where}: argument {index} reads partitioned domain dim {touched[0]} "
                    f"on axis {axis} as {access}; a replicated input can be cut to a device's "
                    "block only along a plain projection; reshard the split input to Broadcast"
                )
            cuts[axis] = self.partition[access.dim][0]
        return self.call.body.take_blocks(value, cuts, value.type)

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
                shape[axis] = extent // prod(self.mesh.shape[m] for m in mesh_axes)
            fields.append(TensorType(tuple(shape), field.dtype))
        if isinstance(self.call.out_type, TupleType):
            return TupleType(tuple(fields))
        return fields[0]

    def completed_axes(self) -> list[int]:
        """Mesh axes that `_settle` all-reduces: a partitioned dim under a replicated result."""
        axes: set[int] = set()
        for field in self.call.out_fields:
            attrs = field.layout.attrs if isinstance(field.layout, ShardLayout) else None
            for mesh_axis in range(self.mesh.rank):
                attr = attrs[mesh_axis] if attrs is not None else None
                if isinstance(attr, Split | Partial) or mesh_axis in self.partial_axes:
                    continue
                if self._split_dim_of(mesh_axis) is not None:
                    axes.add(mesh_axis)
        return sorted(axes)

    def run(self, complete: str | None, op: Op) -> Operand:
        call = self.call
        operands = tuple(self._cut_input(i, v) for i, v in enumerate(call.operands))
        local_out = self._local_out_type()
        rule = STABLEHLO.lookup(type(op))
        arg_types = tuple(_local_types(v) for v in operands)
        per_device = any(leaf.per_device for leaf in leaves(operands))
        names = rule(op, tuple(_names(v) for v in operands), arg_types, local_out, call.lw)
        tupled = isinstance(call.out_type, TupleType)
        locals_ = local_out.fields if tupled else (local_out,)
        results = names if tupled else (names,)
        settled = []
        for index, (name, local) in enumerate(zip(results, locals_, strict=True)):
            field = call.out_fields[index]
            plain = not isinstance(field.layout, ShardLayout)
            shard = Shard(name, field, local, per_device and plain)
            settled.append(self._settle(index, shard, complete))
        return tuple(settled) if tupled else settled[0]

    def _settle(self, index: int, value: Shard, complete: str | None) -> Shard:
        """Check each mesh axis of result `index` against its type; complete or cut as it says."""
        field, body = value.type, self.call.body
        attrs = field.layout.attrs if isinstance(field.layout, ShardLayout) else None
        out_splits = logical_splits(field, self.where) if attrs is not None else {}
        out_axes = self._output_axes(index)
        cuts: dict[int, tuple[int, ...]] = {}
        reduce_axes: list[int] = []
        for mesh_axis in range(self.mesh.rank):
            attr = attrs[mesh_axis] if attrs is not None else None
            dim = self._split_dim_of(mesh_axis)
            read_at = [j for j, a in enumerate(out_axes) if dim is not None and dim in a.dims]
            label = mesh_axis_label(self.mesh, mesh_axis)
            if isinstance(attr, Split):
                out_axis = next(j for j, m in out_splits.items() if mesh_axis in m)
                if dim is None and mesh_axis not in self.partial_axes:
                    if value.local.shape[out_axis] != self.call.out_shapes[index][out_axis]:
                        self._mismatch(label, "Split")
                    cuts[out_axis] = out_splits[out_axis]
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
                        "(a complete effect), but names no combiner; its SPMD_LOWERING rule "
                        "must call run_blocks(complete='sum'|'max'|'min')"
                    )
                reduce_axes.append(mesh_axis)
        if reduce_axes:
            value = self._complete(value, reduce_axes, complete)
        return body.take_blocks(value, cuts, field) if cuts else value

    def _complete(self, value: Shard, mesh_axes: list[int], complete: str) -> Shard:
        """One all-reduce over every completed mesh axis (one combiner, so their order is moot)."""
        if complete not in ("sum", "max", "min"):
            raise UnsupportedError(
                f"{self.where}: completes with {complete!r}; the SPMD exit all-reduces with sum, "
                "max or min (a mean is a sum its SPMD_LOWERING rule divides)"
            )
        return self.call.body.all_reduce(value, mesh_axes, complete, value.type, self.where)

    def _mismatch(self, label: str, declared: str) -> None:
        raise UnsupportedError(
            f"{self.where}: its result type is {declared} on {label}, which running the op on "
            "each device's block does not produce; the op needs an SPMD_LOWERING rule for this "
            "sharding"
        )


def check_local(value: Shard, expected: tuple[int, ...], where: str) -> None:
    """A lowered value must have the block its type gives each device (else it is our bug)."""
    if tuple(value.local.shape) != tuple(expected):
        raise InternalCompilerError(
            f"SPMD exit: {where} holds a local block {list(value.local.shape)} but its type "
            f"{value.type} gives each device {list(expected)}"
        )
