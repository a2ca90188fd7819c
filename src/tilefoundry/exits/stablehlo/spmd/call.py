"""One op call of the per-device program: the evaluator's mesh semantics, written as StableHLO.

The call's `BlockPlan` (DESIGN §4.12), which the reference evaluator's mesh simulation carries out
too, says what each device computes; this module writes it down, so the SPMD exit computes what
the simulation computes: a replicated operand is cut locally to the device's block (a
`dynamic_slice` by device coordinate, never a collective); the op's ordinary StableHLO rule runs
on the LOCAL operand and result types; each result is then settled as the plan says: a Split
result computed whole keeps its block, and a reduced Split whose result is replicated is
all-reduced with the combiner the op's SPMD_LOWERING rule names (the complete effect). Reshard
and Local are what their SPMD_LOWERING rules make of `reshard` and `local` here.

An op whose mesh semantics are more than that (it has a SHARDED_EVAL rule) lowers through its
SPMD_LOWERING rule, which composes the helpers of `SpmdCall`; they mirror the evaluator's
`ShardedCall` helpers name for name (`run_blocks`, `recall`, `splits`, `coords`, `block`,
`aligned`), so a rule reads like the op's SHARDED_EVAL rule, and some rules are literally shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product as cartesian
from math import prod
from typing import Any

import numpy as np

from tilefoundry.errors import InternalCompilerError, UnsupportedError
from tilefoundry.exits.stablehlo.spmd.collectives import DeviceBody, Shard
from tilefoundry.exits.stablehlo.spmd.mesh import EXIT, local_shape
from tilefoundry.ir.core import Op
from tilefoundry.ir.core.nested import flatten
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.lowering.replay import lower_cached
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType, TupleType, Type, bool_, i32
from tilefoundry.ir.types.shard import Mesh, ShardLayout
from tilefoundry.rules import ACCESS_RELATION, STABLEHLO
from tilefoundry.sharding.block_plan import ArgView, BlockPlan, Engine, Kind
from tilefoundry.sharding.shard_reading import canonical_splits

Operand = Shard | tuple["Operand", ...]


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
        self.mesh = _call_mesh(self.operands, self.out_fields, body.mesh)
        self.coords = list(cartesian(*(range(int(e)) for e in self.mesh.shape)))

    # ---- the helpers an SPMD_LOWERING rule composes --------------------------------------

    def run_blocks(
        self,
        complete: str | None = None,
        local_op: Op | None = None,
        depends: Sequence[Sequence[int]] | None = None,
    ) -> Operand:
        """The default lowering; `complete` names the combiner (sum, max, min) that all-reduces
        a mesh axis whose Split the op reduces to a replicated result, and `local_op` (same
        operands and result shape) replaces the op on each device's block. A mean completes as
        a sum its rule divides, so that every device divides once by the global count.
        `depends[i]` names the operands result `i` is computed from, as for the evaluator's
        `ShardedCall.run_blocks` (an op with independent branches, RoPE's q and k)."""
        return _Blocks(self, depends).run(complete, local_op or self.op)

    def recall(
        self,
        operands: Sequence[Operand],
        arg_types: Sequence[Type],
        out_type: Type,
        out_shapes: Sequence[tuple[int, ...]],
    ) -> SpmdCall:
        """The same op on other operands (the evaluator's `ShardedCall.recall`, same signature,
        so one rule body can serve both engines); the operands carry their own types, which
        must be `arg_types`."""
        call = SpmdCall(self.op, operands, out_type, out_shapes, self.body)
        if tuple(arg_types) != call.arg_types:
            raise InternalCompilerError(
                f"SPMD exit: {self.where} recalled with types {arg_types} for operands typed "
                f"{call.arg_types}"
            )
        return call

    def splits(self, arg_index: int) -> dict[int, tuple[int, ...]]:
        """Logical axis -> the mesh axes splitting it, of operand `arg_index` ({} if unsplit)."""
        value = self.operands[arg_index]
        if isinstance(value, tuple) or value.per_device:
            return {}
        return canonical_splits(value.type, self.where, EXIT)

    def block(self, coord: tuple[int, ...], arg_index: int | None = None) -> tuple[slice, ...]:
        """The global index of `coord`'s block of operand `arg_index`, or of the (single) result
        when None; a value no mesh axis splits (or a per-device one) is one whole block. The same
        reading as the evaluator's `ShardedCall.block`, from the same `canonical_splits`."""
        if arg_index is None:
            type_, shape = self.out_fields[0], self.out_shapes[0]
        else:
            value = self.operands[arg_index]
            if value.per_device:
                return tuple(slice(None) for _ in value.local.shape)
            type_, shape = value.type, self.lw.shape(value.type)
        splits = canonical_splits(type_, self.where, EXIT)
        index = []
        for axis, extent in enumerate(shape):
            mesh_axes = splits.get(axis, ())
            size = extent // prod(self.mesh.shape[m] for m in mesh_axes)
            start = 0
            for m in mesh_axes:
                start = start * self.mesh.shape[m] + coord[m]
            index.append(slice(start * size, (start + 1) * size) if mesh_axes else slice(None))
        return tuple(index)

    def aligned(
        self,
        value: Shard,
        axes: Sequence[int | None],
        own: frozenset[int] = frozenset(),
        independent_of: frozenset[int] = frozenset(),
    ):
        """This device's share of operand `value` on the blocks of the (single) result, as the
        evaluator's `ShardedCall.aligned` reads it: axis `j` of `value` runs along result axis
        `axes[j]` (None: an axis the result lacks, which must not be split). A replicated axis
        is cut locally to the result's block (a `dynamic_slice`, nothing moves); an axis split
        as the result is split is the block already; any other pairing fails closed. Axes in
        `own` keep the device's own shard (the rule says what a Split there means). A Partial
        is an addend, used as it is. A split result axis in `independent_of` reads `value`
        whole in every block."""
        out_splits = canonical_splits(self.out_fields[0], self.where, EXIT)
        if value.per_device:
            if out_splits:
                raise UnsupportedError(
                    f"{self.where}: a per-device (Local) value cannot be aligned with a split "
                    "result; reshard the sharded value instead"
                )
            return value
        held = canonical_splits(value.type, self.where, EXIT)
        cuts: dict[int, tuple[int, ...]] = {}
        for axis, out_axis in enumerate(axes):
            have = held.get(axis, ())
            want = out_splits.get(out_axis, ()) if out_axis is not None else ()
            if axis in own or have == want:
                continue
            if have:
                shown = f"result axis {out_axis}" if out_axis is not None else "no result axis"
                labels = ", ".join(mesh_axis_label(self.mesh, m) for m in have)
                raise UnsupportedError(
                    f"{self.where}: an operand split on its axis {axis} (over {labels}) runs "
                    f"along {shown}, which is not split the same way, so its shard is no block "
                    "of the result; reshard that operand to the result's layout first"
                )
            cuts[axis] = want
        covered = {a for a in axes if a is not None} | independent_of
        uncovered = sorted(set(out_splits) - covered)
        if uncovered:
            raise UnsupportedError(
                f"{self.where}: the result is split on axis {uncovered[0]}, along which an "
                "operand has no axis, so no device's block of it can be read from that operand"
            )
        return self.body.take_blocks(value, cuts, value.type, self.mesh)

    def run_local(self, operands: Sequence[Operand], op: Op | None = None) -> Operand:
        """The op's (or `op`'s) ordinary StableHLO rule on per-device `operands` that are
        already each device's share (see `aligned`), giving each device its block of the
        declared result type; nothing is completed or cut afterwards."""
        op = op or self.op
        local_out = _local_out_type(self)
        rule = STABLEHLO.lookup(type(op))
        arg_types = tuple(_local_types(v) for v in operands)
        operand_names = tuple(_names(v) for v in operands)
        names = lower_cached(rule, op, operand_names, arg_types, local_out, self.lw)
        per_device = any(leaf.per_device for leaf in flatten(tuple(operands)))
        return self._wrap(names, local_out, per_device)

    def wrap(self, value: Value) -> Shard:
        """A Value the rule computed (each device's block of the single result) as the result."""
        local = _local_out_type(self)
        if tuple(value.shape) != tuple(local.shape):
            raise InternalCompilerError(
                f"SPMD exit: {self.where} computed a block {list(value.shape)} but its result "
                f"type gives each device {list(local.shape)}"
            )
        return Shard(value.name, self.out_fields[0], local)

    def constant(self, array: Any) -> Shard:
        """A (single, plain) result every device holds as the same constant `array`."""
        field = self.out_fields[0]
        array = np.asarray(array)
        local = TensorType(tuple(array.shape), field.dtype)
        return Shard(self.lw.constant(array, field.dtype, array.shape), field, local)

    def block_start(self, arg_index: int, logical_axis: int) -> Value:
        """Where this device's block of operand `arg_index` starts on `logical_axis` (an i32
        scalar; 0 when no mesh axis splits it)."""
        value = self.operands[arg_index]
        mesh_axes = canonical_splits(value.type, self.where, EXIT).get(logical_axis)
        if not mesh_axes or value.per_device:
            return Value(self.lw, self.body.scalar(0), (), i32)
        name = self.body.block_offset(mesh_axes, value.local.shape[logical_axis], self.mesh)
        return Value(self.lw, name, (), i32)

    def first_along(self, mesh_axes: Sequence[int]) -> Value:
        """Whether this device is the first (coordinate 0) along every one of `mesh_axes` (an
        i1 scalar): where a replicated value must be counted once in a pending sum."""
        first = Value(self.lw, self.lw.constant(True, bool_), (), bool_)
        for m in mesh_axes:
            coordinate = Value(self.lw, self.body.coordinate(m, self.mesh), (), i32)
            first = first & (coordinate == 0)
        return first

    def _wrap(self, names: Any, local_out: Type, per_device: bool) -> Operand:
        tupled = isinstance(self.out_type, TupleType)
        locals_ = local_out.fields if tupled else (local_out,)
        results = names if tupled else (names,)
        shards = tuple(
            Shard(name, field, local, per_device and not isinstance(field.layout, ShardLayout))
            for name, field, local in zip(results, self.out_fields, locals_, strict=True)
        )
        return shards if tupled else shards[0]

    def completes(self) -> bool:
        """Whether the op reduces a split dim to a replicated result (run_blocks all-reduces)."""
        return bool(_Blocks(self).plan.completed_axes())

    def reshard(self, x: Shard) -> Shard:
        from tilefoundry.exits.stablehlo.spmd.reshard import reshard

        return reshard(x, self.out_type, self.body, self.where)

    def local(self, x: Shard) -> Shard:
        """Each device's own block as a per-device value of the plain result type."""
        if not isinstance(x.type.layout, ShardLayout) or x.per_device:
            raise UnsupportedError(f"{self.where}: needs a sharded value; this one has none")
        return Shard(x.name, self.out_type, x.local, per_device=True)

    def value(self, x: Shard) -> Value:
        """`x`'s local array for the Value formulas of `lowering_values`."""
        return Value.of(self.lw, x.name, x.local)


def _local_out_type(call: SpmdCall) -> Type:
    """Each device's block of the call's declared result type (a plain local type)."""
    fields = tuple(
        TensorType(local_shape(field, shape, call.where), field.dtype)
        for field, shape in zip(call.out_fields, call.out_shapes, strict=True)
    )
    return TupleType(fields) if isinstance(call.out_type, TupleType) else fields[0]


def _call_mesh(operands, out_fields, default: Mesh) -> Mesh:
    """The mesh one call runs on: that of its sharded values (typeinfer keeps a call on one
    mesh; a Reshard between two views plans on their refinement itself)."""
    for leaf in flatten(operands):
        if isinstance(leaf.type.layout, ShardLayout):
            return leaf.type.layout.mesh
    for field in out_fields:
        if isinstance(getattr(field, "layout", None), ShardLayout):
            return field.layout.mesh
    return default


def _ir_types(value: Operand) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(_ir_types(v) for v in value))
    return value.type


def _view(value: Operand, lw: Lowering) -> ArgView:
    if isinstance(value, tuple):
        sharded = any(isinstance(leaf.type.layout, ShardLayout) for leaf in flatten(value))
        return ArgView(Kind.SHARDED_TUPLE if sharded else Kind.TUPLE)
    if value.per_device:
        return ArgView(Kind.LOCAL)
    if not isinstance(value.type.layout, ShardLayout):
        return ArgView(Kind.GLOBAL)
    return ArgView(Kind.SHARDED, value.type, lw.shape(value.type))


_ENGINE = Engine(
    name=EXIT,
    rule="SPMD_LOWERING",
    article="an",
    combiners=("sum", "max", "min"),
    label=mesh_axis_label,
)


class _Blocks:
    """The default lowering of one call: the call's block plan, carried out as StableHLO (cut
    each operand with a `dynamic_slice`, run the op's rule, all-reduce and cut as it settles)."""

    def __init__(self, call: SpmdCall, depends: Sequence[Sequence[int]] | None = None):
        self.call, self.where = call, call.where
        views = tuple(_view(v, call.lw) for v in call.operands)
        split = any(canonical_splits(v.type, self.where, EXIT) for v in flatten(call.operands))
        if split and not ACCESS_RELATION.has(type(call.op)):
            raise UnsupportedError(
                f"{self.where}: an operand is Split and the op declares no access relation, so "
                f"{EXIT} cannot tell which block each device computes; the op needs an "
                "SPMD_LOWERING rule, or insert reshard(x, Broadcast)"
            )
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

    def _cut_input(self, index: int, value: Operand) -> Operand:
        """Argument `index` restricted to this device's block of the partitioned dims."""
        cuts = self.plan.input_cuts(index)
        if cuts is None:
            return value
        blocks = {axis: block.mesh_axes for axis, block in cuts.items()}
        return self.call.body.take_blocks(value, blocks, value.type, self.call.mesh)

    def run(self, complete: str | None, op: Op) -> Operand:
        call = self.call
        operands = tuple(self._cut_input(i, v) for i, v in enumerate(call.operands))
        local_out = self.plan.local_out_type()
        rule = STABLEHLO.lookup(type(op))
        arg_types = tuple(_local_types(v) for v in operands)
        per_device = any(leaf.per_device for leaf in flatten(operands))
        operand_names = tuple(_names(v) for v in operands)
        names = lower_cached(rule, op, operand_names, arg_types, local_out, call.lw)
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
        """Result `index` completed and cut as the plan says its type requires."""
        settlement = self.plan.settle(index, complete)
        if settlement.reduce:
            value = self._complete(value, list(settlement.reduce), complete)
        if not settlement.cuts:
            return value
        return self.call.body.take_blocks(value, settlement.cuts, value.type, self.call.mesh)

    def _complete(self, value: Shard, mesh_axes: list[int], complete: str) -> Shard:
        """One all-reduce over every completed mesh axis (one combiner, so their order is moot)."""
        if complete not in _ENGINE.combiners:
            raise UnsupportedError(
                f"{self.where}: completes with {complete!r}; the SPMD exit all-reduces with sum, "
                "max or min (a mean is a sum its SPMD_LOWERING rule divides)"
            )
        body = self.call.body
        return body.all_reduce(value, mesh_axes, complete, value.type, self.where, self.call.mesh)


def check_local(value: Shard, expected: tuple[int, ...], where: str) -> None:
    """A lowered value must have the block its type gives each device (else it is our bug)."""
    if tuple(value.local.shape) != tuple(expected):
        raise InternalCompilerError(
            f"SPMD exit: {where} holds a local block {list(value.local.shape)} but its type "
            f"{value.type} gives each device {list(expected)}"
        )
