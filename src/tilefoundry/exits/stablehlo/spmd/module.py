"""The SPMD exit: a sharded HIR Function as Shardy StableHLO with explicit collectives.

A function whose sharded values live on one `"device"` mesh becomes
`sdy.mesh @mesh = <["x"=2, "y"=4]>` plus `func.func @main` over GLOBAL shapes, each argument and
result annotated `sdy.sharding` from its ShardLayout, whose body is one `sdy.manual_computation`
over every mesh axis. Inside it each device runs the per-device program of the reference mesh
simulation (DESIGN §4.12) on LOCAL shapes: every op is its ordinary StableHLO rule applied to the
local operand and result types (`spmd_call`), replicated operands are cut to the device's block
locally, and the only communication is what the IR asks for — a Reshard (`spmd_reshard`) or a
complete-effect reduction — so the emitted collectives are exactly the IR's. Manual partitioning
is deliberate: letting Shardy propagate would let XLA choose (and add) collectives.

Several meshes over one device set (a 1-D view of 8 devices and a 2x4 view of the same 8) are
views of one id space: the module's `sdy.mesh` is their common refinement (`mesh_views`), each
call runs on its own mesh's coordinates (digits of the partition id) and replica groups, and a
Reshard between two views is planned on their refinement. A loop (GridRegionExpr) is one
per-device `stablehlo.while` whose body holds its collectives.

At the boundary the caller passes and receives global values, as `evaluate` does: a Partial
parameter arrives whole on every device and each device takes its addend of it
(`DeviceBody.addend`), and a Partial result is completed by an all-reduce before it is returned
(the global value of a pending reduction is its reduction, `evaluate(..., complete_partials=True)`).

Refused with UnsupportedError (located at the op's, parameter's or result's source line):
non-device topologies, meshes without a common refinement (naming them), layouts without a
contiguous block per device (a Split on an inner factor, which only a signature can still carry:
ops refuse to make one on a device mesh), per-device (Local) results (no single global value),
and any op whose per-device semantics are not "its rule on the local block" (it has a
SHARDED_EVAL rule) unless it registers an SPMD_LOWERING rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from math import prod
from typing import Any

from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.exits.stablehlo.loops import (
    loop_bounds,
    loop_captures,
    while_condition,
    while_text,
)
from tilefoundry.exits.stablehlo.module_header import (
    STABLEHLO_TARGET_VERSION,
    VERSION_ATTRIBUTE,
    module_name,
)
from tilefoundry.exits.stablehlo.spmd.call import Operand, SpmdCall, check_local
from tilefoundry.exits.stablehlo.spmd.collectives import Collective, DeviceBody, Shard
from tilefoundry.exits.stablehlo.spmd.mesh import (
    EXIT,
    axis_names,
    check_device_mesh,
    local_shape,
    sdy_sharding,
)
from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var, source_span
from tilefoundry.ir.core.nested import flatten, regroup
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr, elaborate, select_variant
from tilefoundry.ir.hir.facts import LoopReads, loop_invariants, program_meshes
from tilefoundry.ir.hir.grid_region import INDUCTION_TYPE
from tilefoundry.ir.hir.walk import run_suspended_walks
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.lowering.mlir_text import dense_literal
from tilefoundry.ir.types import TensorType, TupleType, Type, i64
from tilefoundry.ir.types.shard import Mesh, ShardLayout
from tilefoundry.rules import SHARDED_EVAL, SPMD_LOWERING
from tilefoundry.sharding.mesh_views import Refinement, refine
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

__all__ = [
    "SpmdModule",
    "collective_report",
    "emit_spmd",
    "format_collective_report",
    "lower_spmd",
    "lower_spmd_or_none",
]


@dataclass(frozen=True)
class SpmdModule:
    """The emitted text with what running it needs: the mesh, the parameter and result types
    (global shapes and layouts, flattened) and every collective it contains, in order."""

    text: str
    mesh: Mesh
    param_types: tuple[TensorType, ...]
    result_types: tuple[TensorType, ...]
    collectives: tuple[Collective, ...]
    views: Refinement
    origins: tuple[Expr, ...] = ()
    """The IR call each collective was emitted for (parallel to `collectives`)."""


def _fields(type_: Type) -> list[TensorType]:
    if isinstance(type_, TupleType):
        return [leaf for field in type_.fields for leaf in _fields(field)]
    if isinstance(type_, TensorType):
        return [type_]
    raise UnsupportedError(f"SPMD exit: values of type {type_} have no StableHLO form")


def _renamed(leaf: Shard, name: str) -> Shard:
    return Shard(name, leaf.type, leaf.local, leaf.per_device)


def _renamed_all(names, leaves) -> Iterator[Shard]:
    """Each leaf under its new name (the names in leaf order)."""
    return (_renamed(leaf, name) for name, leaf in zip(names, leaves, strict=True))


def _names(value: Operand) -> list[str]:
    return [leaf.name for leaf in flatten(value)]


def _width(exprs, values) -> int:
    return sum(len(flatten(values[e])) for e in exprs)


def _find_views(fn: Function) -> Refinement:
    """The program's device meshes, as views of one device set: their common refinement (the
    one mesh itself when there is one), refused up front naming the meshes when there is none."""
    meshes = program_meshes(fn)
    if not meshes:
        raise UnsupportedError(
            f"SPMD exit: {fn.name} has no sharded values; emit it with the single-device "
            "StableHLO exit (run_xla without devices=)"
        )
    for mesh in meshes:
        check_device_mesh(mesh, f"SPMD exit: {fn.name}")
    return refine(meshes, f"SPMD exit: {fn.name}", EXIT)


class _Inlining:
    """One body being lowered on `_Emitter.lower`'s explicit stack: its work stack, its values,
    and the @func call it waits on while the callee's body is lowered."""

    def __init__(self, root: Expr, values: dict[Expr, Operand]):
        self.root, self.values = root, values
        self.stack: list[tuple[Expr, bool]] = [(root, False)]
        self.waiting: Expr | None = None

    def returned(self, result: Operand) -> None:
        """The callee this body waited on is lowered: its result is the call's value."""
        self.values[self.waiting] = result


class _Emitter:
    """Lowers one function body (and everything inlined into it) onto one device body."""

    def __init__(self, body: DeviceBody):
        self.body, self.lw = body, body.lw
        self.reads = LoopReads()

    def lower(self, root: Expr, values: dict[Expr, Operand]) -> Operand:
        """Lower `root` given `values`. A @func call is inlined without recursion: the callee's
        body becomes a new entry on an explicit stack and the caller resumes with its result,
        so a deep chain of nested calls costs no Python frames (issue 20)."""
        pending = [_Inlining(root, values)]
        try:
            return run_suspended_walks(
                pending, self._advance, lambda done: done.values[done.root], _Inlining.returned
            )
        except VerifyError as err:  # unlocated inside a callee: located at the innermost call
            for caller in reversed(pending[:-1]):
                err = err.with_location(source_span(caller.waiting))
            raise err from None

    def _advance(self, at: _Inlining) -> _Inlining | None:
        """Lower `at` until done (None) or until a @func call needs its callee's body lowered
        first (returns the callee's entry; `at.waiting` is the call)."""
        stack, values = at.stack, at.values
        while stack:
            node, expanded = stack.pop()
            if node in values:
                continue
            if isinstance(node, GridRegionExpr):
                pending = [i for i in node.init_args if i not in values]
                if pending and not expanded:
                    stack.append((node, True))
                    stack.extend((i, False) for i in reversed(pending))
                    continue
                try:
                    values[node] = self.lower_loop(node, values)
                except VerifyError as err:
                    raise err.with_location(source_span(node)) from None
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(node.operands()) if c not in values)
                continue
            try:
                if isinstance(node, Call) and isinstance(node.target, Function):
                    callee = elaborate(node.target, tuple(a.type for a in node.args))
                    if callee.body is None:
                        callee = select_variant(callee, bindings=dict(self.lw.bindings or {}))
                    args = tuple(values[a] for a in node.args)
                    at.waiting = node
                    return _Inlining(callee.body, dict(zip(callee.params, args, strict=True)))
                self.body.current = node
                values[node] = self.lower_node(node, values)
            except VerifyError as err:  # every refusal names the line of the op it refuses
                raise err.with_location(source_span(node)) from None
        return None

    def lower_loop(self, loop: GridRegionExpr, values: dict[Expr, Operand]) -> Operand:
        """One per-device `stablehlo.while`: the carries are each device's blocks, so the
        collectives the body's Reshards and complete reductions ask for run inside the loop,
        once per iteration (the collective record counts them `trips` times). Loop-invariant
        body values are lowered before it; outer values the body reads are threaded through as
        unchanged carries (the regions capture nothing, device coordinates included)."""
        lw = self.lw
        for node in loop_invariants(loop, self.reads, values):
            self.lower(node, values)
        captures = sorted(loop_captures(loop, values), key=lambda c: _names(values[c]))
        start, stop, step = loop_bounds(loop, lw.bindings)
        index = TensorType((), i64)
        first = Shard(lw.constant(start, i64), INDUCTION_TYPE, index)
        carried = [values[i] for i in loop.init_args]
        threaded = [first, *(leaf for c in carried for leaf in flatten(c))]
        threaded += [leaf for c in captures for leaf in flatten(values[c])]
        types = [lw.type(leaf.local) for leaf in threaded]
        block_args = [lw.fresh() for _ in threaded]
        cond_lines = while_condition(lw, block_args[0], stop)

        inner = _Emitter(self.body.nested(lw.child(4), len(range(start, stop, step))))
        renamed = _renamed_all(block_args, threaded)
        inner_values: dict[Expr, Operand] = {loop.induction_var: next(renamed)}
        for phi, init in zip(loop.carried_args, carried, strict=True):
            inner_values[phi] = regroup(renamed, init)
        for capture in captures:
            inner_values[capture] = regroup(renamed, values[capture])
        inner.lower(loop.body, inner_values)
        yields = []
        for phi, value in zip(loop.carried_args, loop.yield_values, strict=True):
            got = flatten(inner.lower(value, inner_values))
            want = flatten(inner_values[phi])
            for g, w in zip(got, want, strict=True):
                check_local(g, tuple(w.local.shape), f"the carry '{phi.name}' of the loop")
            yields += [g.name for g in got]
        body_lw = inner.lw
        step_name = body_lw.constant(step, i64)
        following = body_lw.op(f"stablehlo.add {block_args[0]}, {step_name} : {lw.type(index)}")
        returned = [following, *yields, *block_args[len(block_args) - _width(captures, values) :]]
        body_lw.line(f'"stablehlo.return"({", ".join(returned)}) : ({", ".join(types)}) -> ()')
        results = while_text(
            lw, [t.name for t in threaded], types, block_args, cond_lines, body_lw.lines
        )
        results = _renamed_all(results if isinstance(results, tuple) else (results,), threaded)
        next(results)
        finals = [regroup(results, init) for init in carried]
        if not finals:
            return ()
        return finals[0] if len(finals) == 1 else tuple(finals)

    def lower_node(self, node: Expr, values: dict[Expr, Operand]) -> Operand:
        if isinstance(node, Var):
            raise UnsupportedError(f"SPMD exit: Var '{node.name}' is used outside its scope")
        if isinstance(node, Constant):
            return self.lower_constant(node)
        if isinstance(node, Tuple):
            return tuple(values[e] for e in node.elements)
        args = tuple(values[a] for a in node.args)
        if isinstance(node.target, Op):
            return self.lower_op(node, args)
        if isinstance(node.target, FusionRegion):
            inner = dict(zip(node.target.inputs, args, strict=True))
            results = tuple(self.lower(output, inner) for output in node.target.outputs)
            return results[0] if len(results) == 1 else results
        raise UnsupportedError(f"SPMD exit: {type(node).__name__} has no per-device lowering")

    def global_shape(self, type_: TensorType) -> tuple[int, ...]:
        return self.lw.shape(type_)

    def lower_constant(self, node: Constant) -> Shard:
        type_ = node.type
        shape = self.global_shape(type_)
        plain = TensorType(shape, type_.dtype)
        name = self.lw.op(
            f"stablehlo.constant {dense_literal(node.value, type_.dtype)} : {self.lw.type(plain)}"
        )
        placed = self.body.take_blocks(
            Shard(name, type_, plain), canonical_splits(type_, "Constant", EXIT), type_
        )
        return self.body.addend(placed, pending_partials(type_))

    def lower_op(self, node: Call, args: tuple[Operand, ...]) -> Operand:
        op, out_type = node.target, node.type
        fields = _fields(out_type)
        shapes = [self.global_shape(f) for f in fields]
        call = SpmdCall(op, args, out_type, shapes, self.body)
        touches = any(
            leaf.per_device or isinstance(leaf.type.layout, ShardLayout) for leaf in flatten(args)
        ) or any(isinstance(f.layout, ShardLayout) for f in fields)
        where = type(op).__name__
        if not touches:
            result = call.run_blocks()
        elif SPMD_LOWERING.has(type(op)):
            result = SPMD_LOWERING.lookup(type(op))(op, args, call)
        elif SHARDED_EVAL.has(type(op)):
            raise UnsupportedError(
                f"{where}: on a mesh it does more than run its rule on each device's block (it "
                "has a SHARDED_EVAL rule) and it registers no SPMD_LOWERING rule, so the SPMD "
                "exit cannot lower it; reshard its operands to plain values first"
            )
        else:
            result = call.run_blocks()
        for leaf, field, shape in zip(flatten(result), fields, shapes, strict=True):
            if not leaf.per_device:
                check_local(leaf, local_shape(field, shape, where), f"the result of {where}")
        return result


def _signature_type(
    type_: TensorType, lw: Lowering, views: Refinement, what: str
) -> tuple[str, str]:
    """(global tensor type, sdy sharding) of a parameter or result; a Partial mesh axis is
    replicated there (the boundary carries the global value, module doc)."""
    return lw.type(type_), sdy_sharding(type_, len(type_.shape), views, what)


def _completed(result: Shard, body: DeviceBody, what: str) -> Shard:
    """A result's global value on every device: its pending reductions all-reduced."""
    by_reduction: dict[str, list[int]] = {}
    for mesh_axis, reduction in pending_partials(result.type).items():
        by_reduction.setdefault(reduction, []).append(mesh_axis)
    for reduction, mesh_axes in sorted(by_reduction.items()):
        result = body.all_reduce(result, mesh_axes, reduction, result.type, what)
    return result


def lower_spmd(fn: Function, *, bindings: Mapping[Any, int] | None = None) -> SpmdModule:
    """Lower `fn` for its device mesh (see the module doc); DimVars resolve through `bindings`."""
    if not isinstance(fn, Function):
        raise UnsupportedError(f"SPMD exit: expected a Function, got {type(fn).__name__}")
    if fn.body is None:
        fn = select_variant(fn, bindings=dict(bindings or {}))
    views = _find_views(fn)
    mesh = views.mesh
    counter = [0]
    outer = Lowering(bindings, counter, indent=4)
    body = DeviceBody(Lowering(bindings, counter, indent=6), mesh)
    emitter = _Emitter(body)

    params, args, in_shardings, block_args, values = [], [], [], [], {}
    param_types: list[TensorType] = []
    for i, p in enumerate(fn.params):
        if not isinstance(p.type, TensorType):
            raise UnsupportedError(f"SPMD exit: parameter '{p.name}' is not a tensor")
        try:
            text, sharding = _signature_type(p.type, outer, views, f"parameter '{p.name}'")
            shape = outer.shape(p.type)
            local = TensorType(local_shape(p.type, shape, p.name), p.type.dtype)
        except UnsupportedError as err:
            raise err.with_location(source_span(p)) from None
        params.append(f"%arg{i}: {text} {{sdy.sharding = #sdy.sharding{sharding}}}")
        args.append(f"%arg{i}")
        in_shardings.append(sharding)
        block_args.append(f"%l{i}: {outer.type(local)}")
        values[p] = body.addend(Shard(f"%l{i}", p.type, local), pending_partials(p.type))
        param_types.append(p.type)

    result = flatten(emitter.lower(fn.body, values))
    result_types = _fields(fn.body.type)
    outs = []
    for index, (leaf, type_) in enumerate(zip(result, result_types, strict=True)):
        what = f"result {index} of {fn.name}"
        if leaf.per_device:
            raise UnsupportedError(
                f"SPMD exit: {what} is a per-device (Local) value with no global value; return "
                "the sharded value instead"
            ).with_location(source_span(fn.body))
        outs.append((_completed(leaf, body, what), *_signature_type(type_, outer, views, what)))
    body.lw.line(
        f"sdy.return {', '.join(s.name for s, _, _ in outs)} : "
        f"{', '.join(outer.type(s.local) for s, _, _ in outs)}"
    )
    global_types = ", ".join(t for _, t, _ in outs)
    names = ", ".join(f'"{n}"' for n in axis_names(mesh))
    count = f":{len(outs)}" if len(outs) > 1 else ""
    manual = (
        f"    %results{count} = sdy.manual_computation({', '.join(args)}) "
        f"in_shardings=[{', '.join(in_shardings)}] "
        f"out_shardings=[{', '.join(s for _, _, s in outs)}] manual_axes={{{names}}} "
        f"({', '.join(block_args)}) {{"
    )
    arg_types = ", ".join(outer.type(t) for t in param_types)
    returned = [f"%results#{i}" for i in range(len(outs))] if count else ["%results"]
    results_sig = ", ".join(f"{t} {{sdy.sharding = #sdy.sharding{s}}}" for _, t, s in outs)
    mesh_text = ", ".join(f'"{n}"={e}' for n, e in zip(axis_names(mesh), mesh.shape, strict=True))
    devices = prod(mesh.shape)
    lines = [
        f"module @{module_name(fn.name)} attributes {{mhlo.num_partitions = {devices} : i32, "
        f'mhlo.num_replicas = 1 : i32, {VERSION_ATTRIBUTE} = "{STABLEHLO_TARGET_VERSION}"}} {{',
        f"  sdy.mesh @mesh = <[{mesh_text}]>",
        f"  func.func public @main({', '.join(params)}) -> ({results_sig}) {{",
        manual,
        *body.lw.lines,
        f"    }} : ({arg_types}) -> " + (f"({global_types})" if count else global_types),
        f"    return {', '.join(returned)} : {global_types}",
        "  }",
        "}",
    ]
    return SpmdModule(
        "\n".join(lines) + "\n",
        mesh,
        tuple(param_types),
        tuple(result_types),
        tuple(body.records),
        views,
        tuple(body.origins),
    )


def lower_spmd_or_none(fn: Function) -> SpmdModule | None:
    """`lower_spmd(fn)`, or None where the exit does not lower `fn` (no device mesh, or a
    refusal such as DimVar shapes without bindings, which `emit` reports). The inspector is given
    this, so it describes what the exit wrote without importing the exit."""
    try:
        return lower_spmd(fn) if program_meshes(fn) else None
    except VerifyError:
        return None


def emit_spmd(fn: Function, *, bindings: Mapping[Any, int] | None = None) -> str:
    """The SPMD StableHLO text of `fn` (Shardy mesh, manual computation, explicit collectives)."""
    return lower_spmd(fn, bindings=bindings).text


@dataclass(frozen=True)
class CollectiveEntry:
    """Identical collectives of one program: how many times one run executes them (`count`;
    a collective in a loop body runs once per iteration) and how many the module text holds
    (`emitted`), their kind, the mesh axes their groups span, their reduction (all_reduce and
    reduce_scatter), the bytes each device puts in (`bytes_per_device`, the operand: what an
    HLO dump counts) and gets out (`result_bytes_per_device`: an all-reduce returns the whole
    operand, a reduce-scatter 1/N of it, an all-gather N times it), and the IR op behind them."""

    count: int
    kind: str
    mesh_axes: str
    reduction: str | None
    bytes_per_device: int
    source: str
    result_bytes_per_device: int = 0
    emitted: int = 0


def collective_report(
    fn: Function, *, bindings: Mapping[Any, int] | None = None
) -> list[CollectiveEntry]:
    """What one run of `fn` communicates, grouped in first-emission order."""
    counts: dict[Collective, int] = {}
    for record in lower_spmd(fn, bindings=bindings).collectives:
        counts[record] = counts.get(record, 0) + 1
    return [
        CollectiveEntry(
            n * c.trips,
            c.kind,
            c.mesh_axes,
            c.reduction,
            c.bytes_per_device,
            c.source,
            c.result_bytes_per_device,
            n,
        )
        for c, n in counts.items()
    ]


def format_collective_report(entries: list[CollectiveEntry]) -> str:
    """A fixed-width table, one line per entry (`count` executions per run; `3 (1 in loop)`
    when the module holds fewer than run), with the bytes per device in and out at the end."""
    if not entries:
        return "no collectives\n"
    lines = [
        f"{'count':>5}  {'kind':<14}  {'mesh axes':<9}  {'reduction':<9}  {'in B/device':>11}  "
        f"{'out B/device':>12}  source"
    ]
    for e in entries:
        looped = f" ({e.emitted} in loop)" if e.emitted != e.count else ""
        lines.append(
            f"{e.count:>5}  {e.kind:<14}  {e.mesh_axes:<9}  {e.reduction or '-':<9}  "
            f"{e.bytes_per_device:>11}  {e.result_bytes_per_device:>12}  {e.source}{looped}"
        )
    sent = sum(e.count * e.bytes_per_device for e in entries)
    received = sum(e.count * e.result_bytes_per_device for e in entries)
    lines.append(
        f"total: {sum(e.count for e in entries)} collective(s), {sent} bytes in and "
        f"{received} bytes out per device"
    )
    return "\n".join(lines) + "\n"
