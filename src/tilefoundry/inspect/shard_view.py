"""Sharding in words: per-mesh-axis states, per-device local shapes, and what a Reshard costs.

The printer spells a ShardLayout exactly (`#shard<@mesh[x=S(0), y=P(sum)], (2,8,8):(64,8,1)>`),
where `S(k)` names a *layout position*. People reading a program ask different questions: which
logical dimension does mesh axis `x` split, what shape does one device hold, and which collective
does this Reshard become. `show`, `report` and the demo answer them from the same functions here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Op, Var, binding_name, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, iter_nodes, post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.text.printer import op_mnemonic
from tilefoundry.ir.types import TensorType, TupleType, format_dim, is_static
from tilefoundry.ir.types.shard import Broadcast, Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.rules import surface_entry
from tilefoundry.sharding.block_plan import ArgView, BlockPlan, Engine, Kind
from tilefoundry.sharding.reshard_plan import (
    AllGather,
    AllReduce,
    ReduceScatter,
    Slice,
    Step,
    plan_reshard,
    reshard_views,
)


def axis_names(layout: ShardLayout) -> tuple[str, ...]:
    mesh = layout.mesh
    return mesh.names or tuple(f"a{i}" for i in range(mesh.rank))


def _position_axes(type_: TensorType) -> list[int] | None:
    """The logical axis of each flat layout position, when the layout factors the logical shape
    axis by axis (the canonical form every annotation produces); None otherwise."""
    flat = [int(e) if is_static(e) else None for e in flatten(type_.layout.layout.shape)]
    if None in flat or not all(is_static(d) for d in type_.shape):
        return None
    owners: list[int] = []
    position = 0
    for axis, extent in enumerate(int(d) for d in type_.shape):
        covered = 1
        while covered < extent and position < len(flat):
            covered *= flat[position]
            owners.append(axis)
            position += 1
        if covered != extent:
            return None
    while position < len(flat) and flat[position] == 1:
        owners.append(len(type_.shape) - 1)
        position += 1
    return owners if position == len(flat) else None


def axis_states(type_: Any) -> list[tuple[str, str]]:
    """(mesh axis, state) for a sharded tensor type: `split dim d`, `partial sum`, `replicated`."""
    if not isinstance(type_, TensorType) or not isinstance(type_.layout, ShardLayout):
        return []
    owners = _position_axes(type_)
    states = []
    for name, attr in zip(axis_names(type_.layout), type_.layout.attrs, strict=True):
        if isinstance(attr, Split):
            where = f"dim {owners[attr.axis]}" if owners else f"layout position {attr.axis}"
            states.append((name, f"split {where}"))
        elif isinstance(attr, Partial):
            states.append((name, f"partial {attr.reduction}"))
        elif isinstance(attr, Broadcast):
            states.append((name, "replicated"))
        else:
            states.append((name, "dynamic"))
    return states


def states_text(type_: Any) -> str:
    return ", ".join(f"{axis}: {state}" for axis, state in axis_states(type_))


def local_shape(type_: TensorType) -> tuple | None:
    """The logical shape one device holds; None for an unsharded type."""
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        return None
    owners = _position_axes(type_)
    if owners is None:
        return tuple(_local_flat(layout))
    local = [1] * len(type_.shape)
    for position, extent in enumerate(_local_flat(layout)):
        local[owners[position]] *= extent
    return tuple(local)


def _local_flat(layout: ShardLayout) -> list:
    """Per flat position: its extent, or 1 where a mesh axis splits it (seed §7.1.1)."""
    split = {attr.axis for attr in layout.attrs if isinstance(attr, Split)}
    return [1 if k in split else e for k, e in enumerate(flatten(layout.layout.shape))]


def devices(type_: TensorType) -> int:
    return prod(int(e) for e in type_.layout.mesh.shape)


def shape_text(shape: tuple) -> str:
    return "[" + ", ".join(format_dim(d) for d in shape) + "]"


def short_type(type_: Any) -> str:
    """`f32[16, 64]`, tuples as `(f32[4], f32[4])`; the layout is reported separately."""
    if isinstance(type_, TensorType):
        return f"{type_.dtype.name}{shape_text(type_.shape)}"
    fields = getattr(type_, "fields", None)
    if fields is not None:
        return "(" + ", ".join(short_type(f) for f in fields) + ")"
    return str(type_)


def reshard_collectives(source: Any, target: Any) -> list[str]:
    """What a Reshard from `source` to `target` does on devices, one line per collective (empty:
    nothing moves), e.g. `tp: all-reduce(sum)` or `tp: reduce-scatter(sum, dim 0)`; between
    two meshes over one device set the axes are named on their common refinement.

    The words describe the steps of `plan_reshard`, the plan the SPMD exit emits, so what `show`
    and the report say a Reshard costs is what the compiled program does. A Reshard the exit
    refuses (a non-canonical layout) says so instead of guessing."""
    if not (isinstance(source, TensorType) and isinstance(target, TensorType)):
        return []
    layouts = [t.layout for t in (source, target) if isinstance(t.layout, ShardLayout)]
    if not layouts:
        return []
    try:
        steps = plan_reshard(source, target, "reshard")
        views = reshard_views(source, target, "reshard", "the SPMD exit")
    except UnsupportedError as err:
        return [f"not lowerable: {err.message}"]
    lines: list[tuple[tuple[int, ...], str]] = []
    for step in steps:
        if isinstance(step, Slice):
            for _, mesh_axes in step.cuts:
                _add_slice(lines, mesh_axes)
        else:
            lines.append(_collective(step))
    names = views.mesh.names or tuple(f"a{i}" for i in range(views.mesh.rank))
    return [f"{','.join(names[m] for m in axes)}: {text}" for axes, text in lines]


def _collective(step: Step) -> tuple[tuple[int, ...], str]:
    """(mesh axes it runs over, its words) for a communicating step."""
    if isinstance(step, AllReduce):
        return step.mesh_axes, f"all-reduce({step.reduction})"
    if isinstance(step, AllGather):
        return step.mesh_axes, f"all-gather(dim {step.axis})"
    if isinstance(step, ReduceScatter):
        return step.mesh_axes, f"reduce-scatter({step.reduction}, dim {step.axis})"
    return (step.mesh_axis,), f"all-to-all(dim {step.source} -> dim {step.dest})"


def _add_slice(lines: list[tuple[tuple[int, ...], str]], mesh_axes: tuple[int, ...]) -> None:
    """A local cut over `mesh_axes`: it finishes the line of the last collective over the same
    axes (an all-reduce then a slice is the exit's Partial -> Split), else stands on its own."""
    for index, (axes, text) in reversed(list(enumerate(lines))):
        if axes == mesh_axes:
            lines[index] = (axes, f"{text}, then slice (local)")
            return
    moved = any(set(axes) & set(mesh_axes) for axes, _ in lines)
    lines.append((mesh_axes, "slice (local)" if moved else "slice (local, no communication)"))


def value_label(expr: Expr, fallback: str) -> str:
    """A value's name as its author bound it, else the op (and source line) that made it."""
    name = binding_name(expr)
    if name:
        return name
    span = source_span(expr)
    return f"{fallback}@{span.line}" if span is not None else fallback


def operation_name(expr: Expr) -> str:
    if isinstance(expr, Call):
        target = expr.target
        if isinstance(target, FusionRegion):
            return f"fusion[{target.kind}]"
        if isinstance(target, Function):
            return f"call @{target.name}"
        return op_mnemonic(target)
    if isinstance(expr, GridRegionExpr):
        return "loop"
    return type(expr).__name__.lower()


@dataclass(frozen=True)
class ValueRow:
    """One value of a function's top-level block, for `show`'s layout table."""

    name: str
    op: str
    type_: Any
    states: str
    local: tuple | None
    devices: int | None
    collectives: tuple[str, ...]


def block_values(fn: Function) -> Iterator[Expr]:
    """Parameters, then every op of the top-level block in dependency order (no constants)."""
    yield from fn.params
    if fn.body is None:
        return
    for node in post_order((fn.body,), BLOCK_OPERANDS):
        if not isinstance(node, Var | Constant):
            yield node


Emitted = dict[int, tuple[tuple[int, str], ...]]
"""id(IR call) -> (emission order, words) of each collective the SPMD exit emits for it."""


def emitted_collectives(fn: Function, spmd: Any) -> Emitted:
    """id(IR call) -> the collectives the SPMD exit emits for that call, in words (e.g.
    `tp: all-reduce(sum)` for a sum over a split axis: the complete effect), read off the
    exit's own record of what it wrote: `spmd`, the exit's module for `fn` (its `collectives`
    and the IR call each came from, `origins`), which the caller passes so that the inspector
    imports no exit. Where the exit does not lower `fn` (`spmd` is None: no device mesh, DimVar
    shapes, or a refusal, which `emit` reports), what the types imply."""
    if spmd is None:
        return _completions_from_types(fn)
    found: dict[int, list[tuple[int, str]]] = {}
    for order, (record, origin) in enumerate(zip(spmd.collectives, spmd.origins, strict=True)):
        words = record.kind.replace("_", "-")
        if record.reduction is not None:
            words += f"({record.reduction})"
        if record.trips > 1:
            words += f" x{record.trips} (once per loop iteration)"
        found.setdefault(id(origin), []).append((order, f"{record.mesh_axes}: {words}"))
    return {key: tuple(words) for key, words in found.items()}


def _completions_from_types(fn: Function) -> Emitted:
    """Where the exit cannot lower `fn` (DimVar shapes without bindings, say), the calls whose
    block plan completes a reduction (DESIGN §4.12: a reduced Split under a replicated result
    all-reduces), read from the types alone; the combiner is the op's rule's choice, so it is
    not named."""
    found: dict[int, tuple[tuple[int, str], ...]] = {}
    if fn.body is None:
        return found
    for order, node in enumerate(iter_nodes(fn.body)):
        if not (isinstance(node, Call) and isinstance(node.target, Op)) or is_reshard(node.target):
            continue
        args = tuple(a.type for a in node.args)
        if not any(isinstance(getattr(t, "layout", None), ShardLayout) for t in args):
            continue
        try:
            views = tuple(
                ArgView(Kind.SHARDED, t, tuple(t.shape))
                if isinstance(getattr(t, "layout", None), ShardLayout)
                else ArgView(Kind.GLOBAL)
                for t in args
            )
            fields = node.type.fields if isinstance(node.type, TupleType) else (node.type,)
            mesh = next(t.layout.mesh for t in args if isinstance(t.layout, ShardLayout))
            plan = BlockPlan(
                node.target,
                args,
                views,
                node.type,
                [tuple(f.shape) for f in fields],
                mesh,
                _TYPE_READER,
            )
            axes = plan.completed_axes()
        except (VerifyError, TypeError, AttributeError):
            continue
        if axes:
            names = axis_names(next(t.layout for t in args if isinstance(t.layout, ShardLayout)))
            label = ",".join(names[m] for m in axes)
            found[id(node)] = ((order, f"{label}: all-reduce (completes the reduction)"),)
    return found


_TYPE_READER = Engine(
    name="the inspector",
    rule="SPMD_LOWERING",
    article="an",
    combiners=("sum", "max", "min"),
    label=mesh_axis_label,
)


def _inner_calls(expr: Expr) -> list[Expr]:
    """`expr` and the calls it holds: a fusion region's members, a loop's body."""
    if isinstance(expr, Call) and isinstance(expr.target, FusionRegion):
        return [expr, *expr.target.body]
    if isinstance(expr, GridRegionExpr):
        return list(iter_nodes(expr))
    return [expr]


def call_collectives(expr: Expr, emitted: Emitted) -> tuple[str, ...]:
    """What one top-level value costs on devices: a Reshard's plan (`reshard_collectives`,
    slices included), else what the exit emits for it or inside it (a complete-effect
    reduction's all-reduce, a loop body's collectives), in emission order."""
    if isinstance(expr, Call) and is_reshard(expr.target):
        return tuple(reshard_collectives(expr.args[0].type, expr.type))
    inside = {id(inner) for inner in _inner_calls(expr)}
    return tuple(words for _, words in sorted(p for key in inside for p in emitted.get(key, ())))


def value_rows(fn: Function, spmd: Any) -> list[ValueRow]:
    """`show`'s layout table; `spmd` as for `emitted_collectives`."""
    rows = []
    emitted = emitted_collectives(fn, spmd)
    for expr in block_values(fn):
        type_ = expr.type
        sharded = isinstance(type_, TensorType) and isinstance(type_.layout, ShardLayout)
        collectives: tuple[str, ...] = ()
        if not isinstance(expr, Var):
            collectives = call_collectives(expr, emitted)
        op = "param" if isinstance(expr, Var) else operation_name(expr)
        rows.append(
            ValueRow(
                name=expr.name if isinstance(expr, Var) else value_label(expr, op),
                op=op,
                type_=type_,
                states=states_text(type_),
                local=local_shape(type_) if sharded else None,
                devices=devices(type_) if sharded else None,
                collectives=tuple(collectives),
            )
        )
    return rows


def is_reshard(target: Any) -> bool:
    """Whether a call target is the op `tf.reshard` names: found through the surface registry,
    so the inspector, like every engine, reads registries rather than op modules (DESIGN §2)."""
    entry = surface_entry("reshard")
    return entry is not None and type(target) is entry.op_class
