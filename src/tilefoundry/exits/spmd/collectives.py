"""The communication and device-indexing ops of an SPMD body, and the record of what moved.

Everything here is written inside the `sdy.manual_computation` over all mesh axes, so each op
sees one device's local arrays. Collectives use flattened global device ids
(`use_global_device_ids`, replica groups from the mesh layout, `spmd_mesh.replica_groups`) and a
fresh channel handle each; `all_to_all` has no such flag and its channel makes its groups
partition ids, which are the same numbers with one replica. A device's own coordinate comes from
`stablehlo.partition_id` through the row-major mesh layout, computed once per body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import ceil, prod

from tilefoundry.exits.spmd.mesh import axes_label, groups_literal, replica_groups
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.types import TensorType, i32
from tilefoundry.ir.types.shard import Mesh
from tilefoundry.ir.types.shard.mesh import c_order_strides


@dataclass(frozen=True)
class Shard:
    """One value of the per-device program: its SSA name, its IR type (global, with its
    ShardLayout), the plain local type every device holds, and whether it is a `Local` view
    (a per-device value with no global meaning)."""

    name: str
    type: TensorType
    local: TensorType
    per_device: bool = False


@dataclass(frozen=True)
class Collective:
    """One emitted collective: what ran, over which mesh axes, and its operand bytes per device."""

    kind: str
    mesh_axes: str
    reduction: str | None
    bytes_per_device: int
    source: str


_COMBINERS = {"sum": "add", "max": "maximum", "min": "minimum"}
_BOOL_COMBINERS = {"sum": "or", "max": "or", "min": "and"}


def nbytes(type_: TensorType) -> int:
    return ceil(prod(int(d) for d in type_.shape) * type_.dtype.bits / 8)


class DeviceBody:
    """The emission state of one manual-computation body: its Lowering, its mesh, the channel
    counter, the device coordinates already computed and the collectives written so far."""

    def __init__(self, lw: Lowering, mesh: Mesh):
        self.lw, self.mesh = lw, mesh
        self.records: list[Collective] = []
        self._coords: dict[int, str] = {}
        self._pid: str | None = None
        self._channel = 0

    # ---- where this device is -------------------------------------------------------------

    def scalar(self, value: int) -> str:
        return self.lw.constant(value, i32)

    def _int_op(self, name: str, lhs: str, rhs: str) -> str:
        return self.lw.op(f"stablehlo.{name} {lhs}, {rhs} : tensor<i32>")

    def coordinate(self, mesh_axis: int) -> str:
        """This device's coordinate along `mesh_axis` (an i32 scalar)."""
        if mesh_axis not in self._coords:
            if self._pid is None:
                raw = self.lw.op('"stablehlo.partition_id"() : () -> tensor<ui32>')
                self._pid = self.lw.op(f"stablehlo.convert {raw} : (tensor<ui32>) -> tensor<i32>")
            stride = c_order_strides(self.mesh.shape)[mesh_axis]
            quotient = self._int_op("divide", self._pid, self.scalar(stride))
            extent = self.scalar(self.mesh.shape[mesh_axis])
            self._coords[mesh_axis] = self._int_op("remainder", quotient, extent)
        return self._coords[mesh_axis]

    def block_offset(self, mesh_axes: Sequence[int], block: int) -> str:
        """Start of this device's block: its mixed-radix index over `mesh_axes` times `block`."""
        index = self.coordinate(mesh_axes[0])
        for m in mesh_axes[1:]:
            scaled = self._int_op("multiply", index, self.scalar(self.mesh.shape[m]))
            index = self._int_op("add", scaled, self.coordinate(m))
        return self._int_op("multiply", index, self.scalar(block))

    def take_blocks(self, x: Shard, cuts: Mapping[int, Sequence[int]], type_: TensorType) -> Shard:
        """`x` cut, per local axis in `cuts`, to this device's block over those mesh axes (a
        local `dynamic_slice`; nothing moves between devices). The result is typed `type_`."""
        if not cuts:
            return Shard(x.name, type_, x.local, x.per_device)
        shape = list(x.local.shape)
        starts = []
        zero = None
        for axis, extent in enumerate(x.local.shape):
            if axis in cuts:
                shape[axis] = extent // prod(self.mesh.shape[m] for m in cuts[axis])
                starts.append(self.block_offset(cuts[axis], shape[axis]))
            else:
                zero = zero or self.scalar(0)
                starts.append(zero)
        local = TensorType(tuple(shape), x.local.dtype)
        types = ", ".join([self.lw.type(x.local)] + ["tensor<i32>"] * len(starts))
        name = self.lw.op(
            f"stablehlo.dynamic_slice {x.name}, {', '.join(starts)}, "
            f"sizes = [{', '.join(map(str, shape))}] : ({types}) -> {self.lw.type(local)}"
        )
        return Shard(name, type_, local)

    # ---- collectives ----------------------------------------------------------------------

    def _attributes(self, mesh_axes: Sequence[int], *, global_ids: bool = True) -> str:
        self._channel += 1
        groups = groups_literal(replica_groups(self.mesh, mesh_axes))
        flag = ", use_global_device_ids" if global_ids else ""
        return (
            f"channel_handle = #stablehlo.channel_handle<handle = {self._channel}, type = 1>, "
            f"replica_groups = {groups}{flag}"
        )

    def _record(self, kind, mesh_axes, reduction, operand: TensorType, source: str) -> None:
        label = axes_label(self.mesh, mesh_axes)
        self.records.append(Collective(kind, label, reduction, nbytes(operand), source))

    def all_reduce(
        self, x: Shard, mesh_axes: Sequence[int], reduction: str, type_: TensorType, source: str
    ) -> Shard:
        """Every device of a group ends with the `reduction` (sum, max, min) of its members'."""
        lw, local = self.lw, x.local
        table = _BOOL_COMBINERS if local.dtype.is_bool else _COMBINERS
        scalar = lw.type(TensorType((), local.dtype))
        a, b = lw.fresh(), lw.fresh()
        inner = lw.child(4)
        combined = inner.op(f"stablehlo.{table[reduction]} {a}, {b} : {scalar}")
        inner.line(f"stablehlo.return {combined} : {scalar}")
        pad = " " * (lw.indent + 2)
        name = lw.op(
            f'"stablehlo.all_reduce"({x.name}) <{{{self._attributes(mesh_axes)}}}> ({{\n'
            f"{pad}^bb0({a}: {scalar}, {b}: {scalar}):\n" + "\n".join(inner.lines) + "\n"
            f"{' ' * lw.indent}}}) : ({lw.type(local)}) -> {lw.type(local)}"
        )
        self._record("all_reduce", mesh_axes, reduction, local, source)
        return Shard(name, type_, local)

    def all_gather(
        self, x: Shard, axis: int, mesh_axes: Sequence[int], type_: TensorType, source: str
    ) -> Shard:
        """Concatenate the group's blocks along local `axis`, mixed-radix over `mesh_axes`."""
        shape = list(x.local.shape)
        shape[axis] *= prod(self.mesh.shape[m] for m in mesh_axes)
        local = TensorType(tuple(shape), x.local.dtype)
        name = self.lw.op(
            f'"stablehlo.all_gather"({x.name}) <{{all_gather_dim = {axis} : i64, '
            f"{self._attributes(mesh_axes)}}}> : ({self.lw.type(x.local)}) -> "
            f"{self.lw.type(local)}"
        )
        self._record("all_gather", mesh_axes, None, x.local, source)
        return Shard(name, type_, local)

    def all_to_all(
        self,
        x: Shard,
        split_axis: int,
        concat_axis: int,
        mesh_axis: int,
        type_: TensorType,
        source: str,
    ) -> Shard:
        """Trade blocks: cut `split_axis` into one piece per device of the group, send piece i
        to member i, and concatenate what arrives along `concat_axis` in group order."""
        count = self.mesh.shape[mesh_axis]
        shape = list(x.local.shape)
        shape[split_axis] //= count
        shape[concat_axis] *= count
        local = TensorType(tuple(shape), x.local.dtype)
        name = self.lw.op(
            f'"stablehlo.all_to_all"({x.name}) <{{split_dimension = {split_axis} : i64, '
            f"concat_dimension = {concat_axis} : i64, split_count = {count} : i64, "
            f"{self._attributes([mesh_axis], global_ids=False)}}}> : "
            f"({self.lw.type(x.local)}) -> {self.lw.type(local)}"
        )
        self._record("all_to_all", [mesh_axis], None, x.local, source)
        return Shard(name, type_, local)
