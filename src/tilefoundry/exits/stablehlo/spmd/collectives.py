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

from tilefoundry.exits.stablehlo.spmd.mesh import axes_label, groups_literal, replica_groups
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.types import TensorType, bool_, i32
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
    """One emitted collective: what ran, over which mesh axes, its operand and result bytes per
    device, the IR op behind it, and how many times one run executes it (the trip count of the
    loops it sits in; 1 outside loops)."""

    kind: str
    mesh_axes: str
    reduction: str | None
    bytes_per_device: int
    source: str
    result_bytes_per_device: int = 0
    trips: int = 1


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
        # The IR call each record was emitted for (set by the emitter before it lowers a call),
        # so readers (`show`, the report) attribute what the exit emits to the op that asked.
        self.origins: list[object] = []
        self.current: object = None
        self._coords: dict[tuple[Mesh, int], str] = {}
        self._pid: str | None = None
        self._channel = [0]
        self.trips = 1

    def nested(self, lw: Lowering, trips: int) -> DeviceBody:
        """The body of a region inside this one (a loop body run `trips` times per run): its
        own Lowering and device coordinates (a region captures no outer SSA value), the same
        channel numbering and collective record."""
        inner = DeviceBody(lw, self.mesh)
        inner.records, inner.origins, inner._channel = self.records, self.origins, self._channel
        inner.trips = self.trips * trips
        return inner

    # ---- where this device is -------------------------------------------------------------

    def scalar(self, value: int) -> str:
        return self.lw.constant(value, i32)

    def _int_op(self, name: str, lhs: str, rhs: str) -> str:
        return self.lw.op(f"stablehlo.{name} {lhs}, {rhs} : tensor<i32>")

    def coordinate(self, mesh_axis: int, mesh: Mesh | None = None) -> str:
        """This device's coordinate along `mesh_axis` of `mesh` (default: the body's), an i32
        scalar. Every mesh of a program is a row-major view of the same device ids (DESIGN
        §4.13), so each coordinate is a digit of the partition id."""
        mesh = mesh or self.mesh
        if (mesh, mesh_axis) not in self._coords:
            if self._pid is None:
                raw = self.lw.op('"stablehlo.partition_id"() : () -> tensor<ui32>')
                self._pid = self.lw.op(f"stablehlo.convert {raw} : (tensor<ui32>) -> tensor<i32>")
            stride = c_order_strides(mesh.shape)[mesh_axis]
            quotient = self._int_op("divide", self._pid, self.scalar(stride))
            extent = self.scalar(mesh.shape[mesh_axis])
            self._coords[mesh, mesh_axis] = self._int_op("remainder", quotient, extent)
        return self._coords[mesh, mesh_axis]

    def addend(self, x: Shard, reductions: Mapping[int, str]) -> Shard:
        """This device's addend of the global value `x` holds, for a value typed Partial on the
        mesh axes of `reductions` (mesh axis -> sum, max or min): a caller passes the value,
        and one correct split of it is the value on coordinate 0 of each sum axis and zeros on
        the others (max and min are idempotent: every device holds the value). The reference
        evaluator draws uneven addends instead; any split has the same reduction."""
        sums = [m for m, reduction in reductions.items() if reduction == "sum"]
        if not sums:
            return x
        lw, scalar, flag = self.lw, TensorType((), i32), TensorType((), bool_)
        first = None
        for mesh_axis in sums:
            here = lw.compare("EQ", self.coordinate(mesh_axis), self.scalar(0), scalar, flag)
            first = here if first is None else lw.elementwise("and", [first, here], flag)
        zeros = lw.constant(0, x.local.dtype, x.local.shape)
        return Shard(lw.select(first, x.name, zeros, flag, x.local), x.type, x.local)

    def block_offset(self, mesh_axes: Sequence[int], block: int, mesh: Mesh | None = None) -> str:
        """Start of this device's block: its mixed-radix index over `mesh_axes` times `block`."""
        mesh = mesh or self.mesh
        index = self.coordinate(mesh_axes[0], mesh)
        for m in mesh_axes[1:]:
            scaled = self._int_op("multiply", index, self.scalar(mesh.shape[m]))
            index = self._int_op("add", scaled, self.coordinate(m, mesh))
        return self._int_op("multiply", index, self.scalar(block))

    def take_blocks(
        self,
        x: Shard,
        cuts: Mapping[int, Sequence[int]],
        type_: TensorType,
        mesh: Mesh | None = None,
    ) -> Shard:
        """`x` cut, per local axis in `cuts`, to this device's block over those mesh axes of
        `mesh` (default: the body's; a local `dynamic_slice`, nothing moves between devices).
        The result is typed `type_`."""
        mesh = mesh or self.mesh
        if not cuts:
            return Shard(x.name, type_, x.local, x.per_device)
        shape = list(x.local.shape)
        starts = []
        zero = None
        for axis, extent in enumerate(x.local.shape):
            if axis in cuts:
                shape[axis] = extent // prod(mesh.shape[m] for m in cuts[axis])
                starts.append(self.block_offset(cuts[axis], shape[axis], mesh))
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

    def _attributes(self, mesh: Mesh, mesh_axes: Sequence[int], *, global_ids=True) -> str:
        self._channel[0] += 1
        groups = groups_literal(replica_groups(mesh, mesh_axes))
        flag = ", use_global_device_ids" if global_ids else ""
        return (
            f"channel_handle = #stablehlo.channel_handle<handle = {self._channel[0]}, type = 1>, "
            f"replica_groups = {groups}{flag}"
        )

    def _record(
        self, kind, mesh: Mesh, mesh_axes, reduction, operand: TensorType, result, source: str
    ) -> None:
        label = axes_label(mesh, mesh_axes)
        self.records.append(
            Collective(kind, label, reduction, nbytes(operand), source, nbytes(result), self.trips)
        )
        self.origins.append(self.current)

    def _combiner_region(self, dtype, reduction: str) -> str:
        """The region combining two elements by `reduction` (bools by or/and)."""
        table = _BOOL_COMBINERS if dtype.is_bool else _COMBINERS
        return self.lw.combiner_region(dtype, table[reduction])

    def all_reduce(
        self,
        x: Shard,
        mesh_axes: Sequence[int],
        reduction: str,
        type_: TensorType,
        source: str,
        mesh: Mesh | None = None,
    ) -> Shard:
        """Every device of a group ends with the `reduction` (sum, max, min) of its members'."""
        mesh, lw, local = mesh or self.mesh, self.lw, x.local
        region = self._combiner_region(local.dtype, reduction)
        name = lw.op(
            f'"stablehlo.all_reduce"({x.name}) <{{{self._attributes(mesh, mesh_axes)}}}> '
            f"{region} : ({lw.type(local)}) -> {lw.type(local)}"
        )
        self._record("all_reduce", mesh, mesh_axes, reduction, local, local, source)
        return Shard(name, type_, local)

    def reduce_scatter(
        self,
        x: Shard,
        axis: int,
        mesh_axes: Sequence[int],
        reduction: str,
        type_: TensorType,
        source: str,
        mesh: Mesh | None = None,
    ) -> Shard:
        """The group's `reduction` of `x`, of which each device keeps only its block along
        local `axis` (blocks numbered mixed-radix over `mesh_axes`, as `take_blocks` cuts)."""
        mesh, lw = mesh or self.mesh, self.lw
        shape = list(x.local.shape)
        shape[axis] //= prod(mesh.shape[m] for m in mesh_axes)
        local = TensorType(tuple(shape), x.local.dtype)
        region = self._combiner_region(local.dtype, reduction)
        name = lw.op(
            f'"stablehlo.reduce_scatter"({x.name}) <{{{self._attributes(mesh, mesh_axes)}, '
            f"scatter_dimension = {axis} : i64}}> {region} : "
            f"({lw.type(x.local)}) -> {lw.type(local)}"
        )
        self._record("reduce_scatter", mesh, mesh_axes, reduction, x.local, local, source)
        return Shard(name, type_, local)

    def all_gather(
        self,
        x: Shard,
        axis: int,
        mesh_axes: Sequence[int],
        type_: TensorType,
        source: str,
        mesh: Mesh | None = None,
    ) -> Shard:
        """Concatenate the group's blocks along local `axis`, mixed-radix over `mesh_axes`."""
        mesh = mesh or self.mesh
        shape = list(x.local.shape)
        shape[axis] *= prod(mesh.shape[m] for m in mesh_axes)
        local = TensorType(tuple(shape), x.local.dtype)
        name = self.lw.op(
            f'"stablehlo.all_gather"({x.name}) <{{all_gather_dim = {axis} : i64, '
            f"{self._attributes(mesh, mesh_axes)}}}> : ({self.lw.type(x.local)}) -> "
            f"{self.lw.type(local)}"
        )
        self._record("all_gather", mesh, mesh_axes, None, x.local, local, source)
        return Shard(name, type_, local)

    def all_to_all(
        self,
        x: Shard,
        split_axis: int,
        concat_axis: int,
        mesh_axis: int,
        type_: TensorType,
        source: str,
        mesh: Mesh | None = None,
    ) -> Shard:
        """Trade blocks: cut `split_axis` into one piece per device of the group, send piece i
        to member i, and concatenate what arrives along `concat_axis` in group order."""
        mesh = mesh or self.mesh
        count = mesh.shape[mesh_axis]
        shape = list(x.local.shape)
        shape[split_axis] //= count
        shape[concat_axis] *= count
        local = TensorType(tuple(shape), x.local.dtype)
        name = self.lw.op(
            f'"stablehlo.all_to_all"({x.name}) <{{split_dimension = {split_axis} : i64, '
            f"concat_dimension = {concat_axis} : i64, split_count = {count} : i64, "
            f"{self._attributes(mesh, [mesh_axis], global_ids=False)}}}> : "
            f"({self.lw.type(x.local)}) -> {self.lw.type(local)}"
        )
        self._record("all_to_all", mesh, [mesh_axis], None, x.local, local, source)
        return Shard(name, type_, local)
