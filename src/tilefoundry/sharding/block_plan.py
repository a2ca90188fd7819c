"""The block plan of one op call on a mesh (DESIGN §4.12), shared by the engines that run it.

The mesh simulation (numpy, per device) and the SPMD exit (StableHLO, per device program) must
compute the same thing on every device, or the exit's output is not checkable against the
simulation. What they share is this pure plan, read from the call's types and the op's access
relation: which iteration-domain dims the input Splits partition (over which mesh axes), how a
replicated input is cut to a device's block (only along a plain projection; anything else fails
closed), the local result type the op runs with, and how each mesh axis of each result is settled
against its declared type (kept, cut to the device's block, or all-reduced by the op's combiner).
An engine carries the plan out in its own medium; the plan's refusals name that engine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import NamedTuple

from tilefoundry.analysis.access_structure import Projection
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Op
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import Mesh, Partial, ShardLayout, Split
from tilefoundry.sharding.axis_access import WholeAxis, axis_accesses, relations_for
from tilefoundry.sharding.operand_names import OperandNames, schema_names
from tilefoundry.sharding.shard_reading import AxisSplit, Splits, axis_splits, pending_partials


class Kind(enum.Enum):
    """What an argument is on the mesh; only the kind decides how the plan treats it."""

    GLOBAL = "global"  # one global value every device holds whole (cut locally if need be)
    SHARDED = "sharded"  # a ShardLayout value: its Splits partition the domain
    LOCAL = "local"  # a per-device value from Local: it has no global block reading
    TUPLE = "tuple"  # a tuple of unsharded values, passed through as it is
    SHARDED_TUPLE = "sharded tuple"  # a tuple holding sharded values: no block reading


@dataclass(frozen=True)
class ArgView:
    """One argument as the plan sees it; `type`/`shape` (its IR type and concrete global shape)
    matter only for a SHARDED argument."""

    kind: Kind
    type: TensorType | None = None
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Engine:
    """Who carries the plan out, so that its refusals say which engine refused and what to add.

    `name` also words the refusal of a non-canonical layout (`shard_reading.axis_splits`, the
    one reading every engine shares); `article` goes before `rule` ("an SPMD_LOWERING rule").
    `inner_factors`: the engine holds a Split on an inner factor of a logical axis as a strided
    share (the reference evaluator); an engine that cannot has it refused by the reading.
    """

    name: str
    rule: str
    article: str
    combiners: tuple[str, ...]
    label: Callable[[Mesh, int], str]
    inner_factors: bool = False


class Block(NamedTuple):
    """A partitioned domain dim: the mesh axes binding it, outermost first, and its extent;
    `split` is the whole reading when the split is on inner factors (None when canonical)."""

    mesh_axes: tuple[int, ...]
    extent: int
    split: AxisSplit | None = None


@dataclass(frozen=True)
class Settlement:
    """How to finish one result: all-reduce over `reduce` (with the op's combiner), then keep
    each device's block along each result axis in `cuts` (it was computed whole there)."""

    reduce: tuple[int, ...]
    cuts: Splits


class BlockPlan:
    """The plan of one call of `op` on `mesh`; `depends[i]` names the arguments result `i` is
    computed from (default: all of them), for ops with independent branches (RoPE's q and k),
    where a partitioned dim or a Partial of one branch says nothing about the other's result."""

    def __init__(
        self,
        op: Op,
        arg_types: Sequence[Type],
        args: Sequence[ArgView],
        out_type: Type,
        out_shapes: Sequence[tuple[int, ...]],
        mesh: Mesh,
        engine: Engine,
        depends: Sequence[Sequence[int]] | None = None,
    ):
        self.where, self.engine, self.mesh = type(op).__name__, engine, mesh
        self.args, self.out_type = tuple(args), out_type
        self.out_fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        self.out_shapes = tuple(out_shapes)
        every = tuple(range(len(self.args)))
        self.depends = tuple(depends) if depends is not None else (every,) * len(self.out_fields)
        # Unsharded arguments need no access map: the op runs whole on every device.
        sharded = any(a.kind is Kind.SHARDED for a in self.args)
        self.relations = relations_for(op, tuple(arg_types)) if sharded else None
        self._names = schema_names(op, len(self.args))
        self.partition: dict[int, Block] = {}
        self._partitioned_by: dict[int, int] = {}  # domain dim -> the argument that split it
        self.partials_of: dict[int, frozenset[int]] = {}
        for index, arg in enumerate(self.args):
            self._collect(index, arg)

    @cached_property
    def words(self) -> OperandNames:
        """How refusals name the arguments (the op's ParamDef names) and the domain dims."""
        return OperandNames(self._names, self.relations, "argument")

    def _input_axes(self, index: int) -> tuple:
        return axis_accesses(self.relations.inputs[index].pattern)

    def _output_axes(self, index: int) -> tuple:
        if self.relations is None:
            return tuple(WholeAxis() for _ in self.out_shapes[index])
        return axis_accesses(self.relations.outputs[index].pattern)

    def _collect(self, index: int, arg: ArgView) -> None:
        """Bind each Split of argument `index` to the domain dim its projection reads."""
        words = self.words
        if arg.kind is Kind.SHARDED_TUPLE:
            self._refuse(f"{words.operand(index)} is a tuple holding sharded values")
        if arg.kind is not Kind.SHARDED:
            return
        self.partials_of[index] = frozenset(pending_partials(arg.type))
        for logical_axis, split in self.splits_of(arg.type).items():
            mesh_axes = split.mesh_axes
            access = self._input_axes(index)[logical_axis]
            if not isinstance(access, Projection):
                labels = ", ".join(self.engine.label(self.mesh, a) for a in mesh_axes)
                raise UnsupportedError(
                    f"{self.where}: {words.operand(index)} is Split on {labels} along logical "
                    f"axis {logical_axis}, which the op reads as {access}; {self.engine.name} "
                    f"partitions only dims read through a plain projection; insert "
                    f"reshard({words.value(index)}, Broadcast) first"
                )
            entry = Block(mesh_axes, arg.shape[logical_axis], None if split.canonical else split)
            first = self._partitioned_by.setdefault(access.dim, index)
            if self.partition.setdefault(access.dim, entry) != entry:
                raise UnsupportedError(
                    f"{self.where}: {words.operands(first, index)} split "
                    f"{words.dim(access.dim)} differently "
                    f"({_shown(self.partition[access.dim])} vs {_shown(entry)}); reshard one "
                    "of them first"
                )

    def splits_of(self, type_: Type) -> dict[int, AxisSplit]:
        """How mesh axes split each logical axis of `type_`, as this engine can read it."""
        return axis_splits(
            type_, self.where, self.engine.name, inner_factors=self.engine.inner_factors
        )

    def _refuse(self, why: str) -> None:
        engine = self.engine
        raise UnsupportedError(
            f"{self.where}: {why}, so {engine.name} cannot tell which block each device "
            f"computes; the op needs {engine.article} {engine.rule} rule, or insert "
            "reshard(x, Broadcast)"
        )

    def input_cuts(self, index: int) -> dict[int, Block] | None:
        """Per axis of argument `index`, the partitioned dim a device reads only its block of;
        None when the argument is used as it is (a tuple, or nothing is partitioned)."""
        arg = self.args[index]
        if arg.kind in (Kind.TUPLE, Kind.SHARDED_TUPLE) or not self.partition:
            return None
        if arg.kind is Kind.LOCAL:
            raise UnsupportedError(
                f"{self.where}: {self.words.operand(index)} is a per-device (Local) value (the "
                "result of "
                "local, or computed from one) while another argument is split, so "
                f"{self.engine.name} cannot tell which block of it each device holds; apply the "
                "op to the sharded value before taking its local view"
            )
        held = self.splits_of(arg.type)  # {} unless SHARDED
        cuts: dict[int, Block] = {}
        for axis, access in enumerate(self._input_axes(index)):
            touched = [d for d in access.dims if d in self.partition]
            if axis in held or not touched:
                continue
            if not isinstance(access, Projection):
                raise UnsupportedError(
                    f"{self.where}: {self.words.operand(index)} reads partitioned "
                    f"{self.words.dim(touched[0])} on axis {axis} as {access}; a replicated "
                    "input can be cut to a device's block only along a plain projection; "
                    "reshard the split input to Broadcast"
                )
            cuts[axis] = self.partition[access.dim]
        return cuts

    def _local_shape(self, index: int) -> tuple[int, ...]:
        shape = list(self.out_shapes[index])
        for axis, access in enumerate(self._output_axes(index)):
            touched = [d for d in access.dims if d in self.partition]
            if not touched:
                continue
            if not isinstance(access, Projection):
                raise UnsupportedError(
                    f"{self.where}: result {index} writes partitioned "
                    f"{self.words.dim(touched[0])} on axis {axis} as {access}, not a plain "
                    "projection; insert reshard(x, Broadcast) on the split input first"
                )
            mesh_axes, extent, _ = self.partition[access.dim]
            shape[axis] = extent // prod(self.mesh.shape[a] for a in mesh_axes)
        return tuple(shape)

    def local_out_type(self) -> Type:
        """The plain type each device's result has: the global one, cut on partitioned dims."""
        fields = tuple(
            TensorType(self._local_shape(index), field.dtype, None, field.storage)
            for index, field in enumerate(self.out_fields)
        )
        return TupleType(fields) if isinstance(self.out_type, TupleType) else fields[0]

    def _relevant_dims(self, index: int) -> set[int]:
        """The partitioned dims result `index` sees: read by an argument it is computed from, or
        written by it. Every device computes a result whole along any other partitioned dim."""
        dims = {d for a in self._output_axes(index) for d in a.dims}
        for arg in self.depends[index]:
            if self.relations is not None and self.args[arg].kind is not Kind.TUPLE:
                dims |= {d for a in self._input_axes(arg) for d in a.dims}
        return dims & set(self.partition)

    def _axes(self, index: int) -> Iterator[tuple[int, object, int | None, bool]]:
        """Per mesh axis of result `index`: its declared attr, the relevant partitioned dim it
        binds (or None), and whether an argument the result depends on is Partial there."""
        field = self.out_fields[index]
        attrs = field.layout.attrs if isinstance(field.layout, ShardLayout) else None
        relevant = self._relevant_dims(index)
        partials = set().union(*(self.partials_of.get(a, ()) for a in self.depends[index]))
        for mesh_axis in range(self.mesh.rank):
            bound = [d for d, b in self.partition.items() if mesh_axis in b.mesh_axes]
            dim = next((d for d in bound if d in relevant), None)
            attr = attrs[mesh_axis] if attrs is not None else None
            yield mesh_axis, attr, dim, mesh_axis in partials

    def completed_axes(self) -> tuple[int, ...]:
        """The mesh axes `settle` all-reduces for some result: a partitioned dim whose result
        is replicated there (the complete effect, which needs the op's combiner)."""
        axes = {
            mesh_axis
            for index in range(len(self.out_fields))
            for mesh_axis, attr, dim, partial in self._axes(index)
            if not isinstance(attr, Split | Partial) and not partial and dim is not None
        }
        return tuple(sorted(axes))

    def settle(self, index: int, complete: str | None) -> Settlement:
        """Check each mesh axis of result `index` against its type; say what completes or cuts
        it. `complete` is the op's combiner for a reduced Split under a replicated result."""
        field = self.out_fields[index]
        read = self.splits_of(field)
        out_splits = {axis: split.mesh_axes for axis, split in read.items()}
        out_axes = self._output_axes(index)
        local = self._local_shape(index)
        reduce: list[int] = []
        cuts: Splits = {}
        for mesh_axis, attr, dim, partial in self._axes(index):
            read_at = [j for j, a in enumerate(out_axes) if dim is not None and dim in a.dims]
            label = self.engine.label(self.mesh, mesh_axis)
            if isinstance(attr, Split):
                out_axis = next(j for j, m in out_splits.items() if mesh_axis in m)
                if dim is None and not partial:
                    if local[out_axis] != self.out_shapes[index][out_axis]:
                        self._mismatch(label, "Split")
                    cuts[out_axis] = out_splits[out_axis]
                elif read_at != [out_axis] or not _same_split(read[out_axis], self.partition[dim]):
                    self._mismatch(label, f"Split on logical axis {out_axis}")
            elif isinstance(attr, Partial):
                if dim is None and not partial:
                    self._mismatch(label, f"Partial({attr.reduction}) with no per-device addends")
                if dim is not None and read_at:
                    self._mismatch(label, f"Partial({attr.reduction})")
            elif partial:
                self._mismatch(label, "complete (only a Reshard completes a Partial)")
            elif dim is not None:
                if read_at:
                    self._mismatch(label, "replicated")
                if complete is None:
                    combiners = "|".join(repr(c) for c in self.engine.combiners)
                    raise UnsupportedError(
                        f"{self.where}: reduces the dim split on {label} to a replicated result "
                        "(a complete effect), but names no combiner; its "
                        f"{self.engine.rule} rule must call run_blocks(complete={combiners})"
                    )
                reduce.append(mesh_axis)
        return Settlement(tuple(reduce), cuts)

    def _mismatch(self, label: str, declared: str) -> None:
        engine = self.engine
        raise UnsupportedError(
            f"{self.where}: its result type is {declared} on {label}, which running the op on "
            f"each device's block does not produce; the op needs {engine.article} {engine.rule} "
            "rule for this sharding (or the typeinfer rule that derived it is unsound)"
        )


def _same_split(split: AxisSplit, block: Block) -> bool:
    """Whether a result axis split as `split` holds exactly the partitioned dim's blocks."""
    inner = None if split.canonical else split
    return split.mesh_axes == block.mesh_axes and inner == block.split


def _shown(block: Block) -> str:
    """A partitioned dim as a refusal shows it: its mesh axes and extent, and the split factors
    when they are inner ones."""
    text = (block.mesh_axes, block.extent)
    if block.split is None:
        return str(text)
    return f"{text} on factors {block.split.offsets} of {block.split.factors}"
