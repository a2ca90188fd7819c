"""The per-CTA body of a tile program, traced into a Pallas kernel.

Each value is what ONE CTA holds: a value Split over the cta mesh is its block, a replicated one
is whole. Every op call is carried out as the reference evaluator's mesh simulation carries it
out (DESIGN §4.12, the shared `BlockPlan`): a replicated operand is cut to this CTA's block
(`kx.block` at `pl.program_id`, never communication), the op's PALLAS rule runs on the local
operands, and each result is settled against its declared type. What a grid of independent
programs cannot do is refused at the op, located: a result that completes a reduction across
CTAs (an all-reduce), a Reshard that gathers blocks from other CTAs, a Partial anywhere.

Loops (`GridRegionExpr`) become `lax.fori_loop`; loop-invariant values computed before the loop
are captured, not recomputed. FusionRegions and Function calls are inlined (their ops keep their
rules). Gmem parameters stay kernel Refs until an op reads them, so a windowed read in a loop
(DynamicSlice) loads only its tile through `pl.ds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import InternalCompilerError, UnsupportedError, VerifyError
from tilefoundry.exits.pallas.gpu import SCOPE
from tilefoundry.exits.pallas.grid import EXIT, fields, local_block
from tilefoundry.exits.pallas.namespace import KernelNamespace, KernelRef
from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var, source_span
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr, elaborate, select_variant
from tilefoundry.ir.hir.facts import LoopReads
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.hir.signature import bind_dim_vars
from tilefoundry.ir.hir.walk import run_suspended_walks
from tilefoundry.ir.types import TensorType, TupleType, Type, resolve_dim
from tilefoundry.ir.types.shard import Mesh, ShardLayout
from tilefoundry.rules import PALLAS, PALLAS_REF_READERS, PALLAS_SHARDED, SHARDED_EVAL
from tilefoundry.sharding.block_plan import ArgView, BlockPlan, Engine, Kind
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

ENGINE = Engine(name=EXIT, rule="PALLAS_SHARDED", article="a", combiners=(), label=mesh_axis_label)


class _Frame:
    """One activation or loop iteration: its bound Vars and the values computed in it."""

    def __init__(self, parent: _Frame | None, variables: dict[Var, Any]):
        self.parent, self.variables, self.memo = parent, variables, {}

    def find(self, node: Expr) -> tuple[bool, Any]:
        frame = self
        while frame is not None:
            if node in frame.memo:
                return True, frame.memo[node]
            if isinstance(node, Var) and node in frame.variables:
                return True, frame.variables[node]
            frame = frame.parent
        return False, None


class _Inlining:
    """One body being traced on `KernelBody.value`'s explicit stack: its work stack, its frame,
    its DimVar bindings, and the @func call it waits on while the callee is traced."""

    def __init__(self, root: Expr, frame: _Frame, bindings: dict):
        self.root, self.frame, self.bindings = root, frame, bindings
        self.stack: list[tuple[Expr, bool]] = [(root, False)]
        self.waiting: Expr | None = None

    def returned(self, result: Any) -> None:
        """The callee this body waited on is traced: its result is the call's value."""
        self.frame.memo[self.waiting] = result


class KernelBody:
    """Traces a Function body for one CTA (call `run` inside the kernel function)."""

    def __init__(
        self,
        fn: Function,
        bindings: dict,
        mesh: Mesh | None,
        kx: KernelNamespace,
        constants: dict[Constant, Any] | None = None,
    ):
        """`constants`: the array constants the launch passes in as inputs (their Refs)."""
        self.fn, self.bindings, self.mesh, self.kx = fn, bindings, mesh, kx
        self.constants = constants or {}
        self._program_ids: tuple | None = None
        self._reads = LoopReads()
        self.scoped_calls: list[Call] = []
        """The op calls traced, in order: call i's rule runs under the named scope
        `gpu.SCOPE + str(i)`, so each jax primitive is traced back to its call."""

    # -- CTA coordinates ---------------------------------------------------------------------

    def program_ids(self) -> tuple:
        """`pl.program_id` per mesh axis, read once at the kernel's top level (`run`), so a
        cut first needed inside a loop body uses values of the kernel's scope, not the loop's."""
        if self._program_ids is None:
            raise InternalCompilerError(f"{EXIT}: program ids read before the kernel ran")
        return self._program_ids

    def block_index(self, mesh_axes: Sequence[int]) -> Any:
        """This CTA's block number over `mesh_axes` (mixed radix, outermost first)."""
        ids, index = self.program_ids(), 0
        for axis in mesh_axes:
            index = index * self.mesh.shape[axis] + ids[axis]
        return index

    def take_blocks(self, value: Any, cuts: dict[int, Sequence[int]]) -> Any:
        """`value` cut to this CTA's block along each axis in `cuts` (axis -> mesh axes)."""
        for axis, mesh_axes in sorted(cuts.items()):
            count = prod(self.mesh.shape[a] for a in mesh_axes)
            value = self.kx.block(value, axis, self.block_index(mesh_axes), count)
        return value

    # -- the walk ----------------------------------------------------------------------------

    def run(self, params: Sequence[Any]) -> Any:
        rank = self.mesh.rank if self.mesh is not None else 0
        self._program_ids = tuple(self.kx.pl.program_id(a) for a in range(rank))
        frame = _Frame(None, dict(zip(self.fn.params, params, strict=True)))
        return self.value(self.fn.body, frame)

    def value(self, root: Expr, frame: _Frame) -> Any:
        """Trace `root`. A @func call is inlined without recursion: the callee's body becomes a
        new entry on an explicit stack (with its own DimVar bindings) and the caller resumes
        with its result, so deep chains of nested calls cost no Python frames (issue 20)."""
        outer = self.bindings
        try:
            return run_suspended_walks(
                [_Inlining(root, frame, outer)],
                self._advance,
                lambda done: done.frame.find(done.root)[1],
                _Inlining.returned,
            )
        finally:
            self.bindings = outer

    def _advance(self, at: _Inlining) -> _Inlining | None:
        """Trace `at` until done (None) or until a @func call needs its callee traced first
        (returns the callee's entry; `at.waiting` is the call)."""
        stack, frame = at.stack, at.frame
        self.bindings = at.bindings  # DimVars resolve in the body being traced
        while stack:
            node, expanded = stack.pop()
            if frame.find(node)[0]:
                continue
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in node.block_operands())
                continue
            if isinstance(node, Call) and isinstance(node.target, Function):
                args = tuple(frame.find(c)[1] for c in node.block_operands())
                callee, bindings = self._callee(node)
                at.waiting = node
                inner = _Frame(None, dict(zip(callee.params, args, strict=True)))
                return _Inlining(callee.body, inner, bindings)
            frame.memo[node] = self._compute(node, frame)
        return None

    def _compute(self, node: Expr, frame: _Frame) -> Any:
        if isinstance(node, Var):
            raise InternalCompilerError(f"{EXIT}: Var '{node.name}' is not bound in the kernel")
        if isinstance(node, Constant):
            return self._constant(node)
        args = tuple(frame.find(c)[1] for c in node.block_operands())
        if isinstance(node, Tuple):
            return args
        if isinstance(node, GridRegionExpr):
            return self._loop(node, args, frame)
        if isinstance(node, Call) and isinstance(node.target, Op):
            self.scoped_calls.append(node)
            self.kx.calling = type(node.target).__name__
            try:
                with self.kx.scope(f"{SCOPE}{len(self.scoped_calls) - 1}"):
                    return self._call_op(node, args)
            except VerifyError as err:
                raise err.with_location(source_span(node)) from None
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            region = node.target
            inner = _Frame(None, dict(zip(region.inputs, args, strict=True)))
            results = tuple(self.value(output, inner) for output in region.outputs)
            return results[0] if len(results) == 1 else results
        raise UnsupportedError(
            f"{type(node).__name__}: {EXIT} has no lowering for this node",
            location=source_span(node),
        )

    def _callee(self, node: Call) -> tuple[Function, dict]:
        """A call of a `@func` is inlined: elaborated for the argument types, its DimVars bound
        from the arguments' global shapes, a dispatch base resolved to its variant; returns the
        Function whose body is traced and its bindings."""
        arg_types = tuple(a.type for a in node.args)
        callee = elaborate(node.target, arg_types)
        shapes = [
            tuple(d if isinstance(d, int) else resolve_dim(d, self.bindings) for d in t.shape)
            for t in arg_types
        ]
        bindings = bind_dim_vars(callee.name, callee.params, shapes)
        if callee.is_dispatch_base:
            callee = select_variant(callee, bindings={v.name: n for v, n in bindings.items()})
        TypeInferContext().infer(callee)
        return callee, bindings

    def _constant(self, node: Constant) -> Any:
        if isinstance(node.type.layout, ShardLayout):
            raise UnsupportedError(
                f"Constant: a sharded constant {node.type} has no per-CTA block in {EXIT}; "
                "write a plain constant and reshard it",
                location=source_span(node),
            )
        if node in self.constants:
            return self.constants[node]
        if np.size(node.value) > 1:
            raise UnsupportedError(
                f"Constant: an array constant {node.type} in a called function; a kernel may "
                f"not capture arrays and {EXIT} passes in only the top-level body's; pass it "
                "as a parameter",
                location=source_span(node),
            )
        return self.kx.jnp.asarray(node.value, self.kx.dtype(node.type.dtype))

    def _static(self, dim: Any, what: str, node: Expr) -> int:
        try:
            return dim if isinstance(dim, int) else resolve_dim(dim, self.bindings)
        except VerifyError as err:
            raise UnsupportedError(
                f"GridRegionExpr: loop {what} {dim} is not known when the kernel is built: {err}",
                location=source_span(node),
            ) from None

    def _hoist(self, node: GridRegionExpr, frame: _Frame) -> None:
        """Compute the loop body's invariant values before the loop (the kernel loads a tile
        that does not change with the iteration once, not on every trip)."""
        reads = self._reads
        reads.of(node)  # the loop first: its Vars are known before its body is asked about
        for inner in iter_nodes(node.body, *node.yield_values):
            if not isinstance(inner, Call | GridRegionExpr):
                continue
            if all(frame.find(v)[0] for v in reads.of(inner)):
                self.value(inner, frame)

    def _loop(self, node: GridRegionExpr, inits: tuple, frame: _Frame) -> Any:
        """`for i in range(start, extent, step)` as one `lax.fori_loop` over the trip count."""
        start, extent, step = (
            self._static(getattr(node, n), n, node) for n in ("start", "extent", "step")
        )
        if step <= 0:
            raise UnsupportedError(
                f"GridRegionExpr: step {step} must be positive", location=source_span(node)
            )
        if not node.carried_args:
            return ()
        self._hoist(node, frame)
        jnp, kx = self.kx.jnp, self.kx
        carry0 = tuple(jnp.asarray(kx.load(v)) for v in inits)
        trips = len(range(start, extent, step))

        def body(trip, carry):
            index = jnp.asarray(start, jnp.int32) + trip * step
            variables = {node.induction_var: index}
            variables.update(zip(node.carried_args, carry, strict=True))
            iteration = _Frame(frame, variables)
            self.value(node.body, iteration)
            yielded = tuple(self.value(y, iteration) for y in node.yield_values)
            return tuple(
                jnp.asarray(kx.load(y)).astype(c.dtype) for y, c in zip(yielded, carry, strict=True)
            )

        carry = self.kx.lax.fori_loop(0, trips, body, carry0)
        return carry[0] if len(carry) == 1 else tuple(carry)

    # -- one op call -------------------------------------------------------------------------

    def _out_shapes(self, out_type: Type) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(d if isinstance(d, int) else resolve_dim(d, self.bindings) for d in f.shape)
            for f in fields(out_type)
        )

    def _call_op(self, call: Call, args: tuple) -> Any:
        op, out_type = call.target, call.type
        arg_types = tuple(a.type for a in call.args)
        every = [t for a in arg_types for t in fields(a)] + list(fields(out_type))
        if not any(isinstance(t.layout, ShardLayout) for t in every):
            out = _plain(out_type, self._out_shapes(out_type))
            return self.local(op, args, arg_types, out)
        refuse_partials(op, arg_types, out_type)
        check_rules(op, on_mesh=True)
        pallas_call = PallasCall(self, op, args, arg_types, out_type, self._out_shapes(out_type))
        if PALLAS_SHARDED.has(type(op)):
            return PALLAS_SHARDED.lookup(type(op))(op, args, pallas_call)
        return pallas_call.run_blocks()

    def local(self, op: Op, args: tuple, declared: Sequence[Type], out_type: Type) -> Any:
        """The op's PALLAS rule on this CTA's operands (`declared`: their IR types); `out_type`
        is the local plain type. The rule sees each operand's local plain type."""
        cls = type(op)
        check_rules(op, on_mesh=False)
        if cls not in PALLAS_REF_READERS:
            args = tuple(_load(self.kx, a) for a in args)
        arg_types = tuple(_local_type(a, t) for a, t in zip(args, declared, strict=True))
        result = PALLAS.lookup(cls)(op, args, arg_types, out_type, self.kx)
        _check_shapes(cls.__name__, result, out_type)
        return result


class PallasCall:
    """One call of `op` touching the cta mesh: what a PALLAS_SHARDED rule composes."""

    def __init__(self, body: KernelBody, op: Op, args, arg_types, out_type, out_shapes):
        self.body, self.op, self.args = body, op, tuple(args)
        self.arg_types, self.out_type, self.out_shapes = tuple(arg_types), out_type, out_shapes
        self.where = type(op).__name__

    def _view(self, index: int) -> ArgView:
        type_ = self.arg_types[index]
        if isinstance(type_, TupleType):
            sharded = any(isinstance(t.layout, ShardLayout) for t in fields(type_))
            return ArgView(Kind.SHARDED_TUPLE if sharded else Kind.TUPLE)
        if not isinstance(type_.layout, ShardLayout):
            return ArgView(Kind.GLOBAL)
        return ArgView(Kind.SHARDED, type_, self.global_shape(index))

    def run_blocks(self) -> Any:
        """The default: cut replicated operands to this CTA's block, run the op's PALLAS rule,
        cut each result that was computed whole to the block its type says."""
        views = tuple(self._view(i) for i in range(len(self.args)))
        plan = BlockPlan(
            self.op, self.arg_types, views, self.out_type, self.out_shapes, self.body.mesh, ENGINE
        )
        completed = plan.completed_axes()
        if completed:
            labels = ", ".join(mesh_axis_label(self.body.mesh, a) for a in completed)
            raise UnsupportedError(
                f"{self.where}: reduces a dim split over the CTAs on {labels} to a replicated "
                "result; completing it needs a reduction across CTAs (a second pass or atomics), "
                f"which one pallas_call does not express; keep the reduced dim whole in each "
                "CTA (reshard the operand so that dim is not split) or reduce after the kernel"
            )
        operands = []
        for index, value in enumerate(self.args):
            cuts = plan.input_cuts(index)
            if cuts:
                value = self.body.take_blocks(value, {a: b.mesh_axes for a, b in cuts.items()})
            operands.append(value)
        local_out = plan.local_out_type()
        result = self.body.local(self.op, tuple(operands), self.arg_types, local_out)
        tupled = isinstance(self.out_type, TupleType)
        results = result if tupled else (result,)
        settled = []
        for index, value in enumerate(results):
            cuts = plan.settle(index, None).cuts
            settled.append(self.body.take_blocks(value, dict(cuts)) if cuts else value)
        return tuple(settled) if tupled else settled[0]

    @property
    def out_fields(self) -> tuple[TensorType, ...]:
        return fields(self.out_type)

    def splits(self, index: int) -> dict[int, tuple[int, ...]]:
        """Logical axis -> the mesh axes splitting it, of tensor operand `index`."""
        return canonical_splits(self.arg_types[index], self.where, EXIT)

    def global_shape(self, index: int) -> tuple[int, ...]:
        """The concrete global shape of tensor operand `index`."""
        return tuple(resolve_dim(d, self.body.bindings) for d in self.arg_types[index].shape)

    def aligned(self, index: int, axes: Sequence[int | None]) -> Any:
        """Operand `index` as this CTA's share of the result: along each of its axes `a` that
        runs along result axis `axes[a]` (None: along none), a replicated operand is cut to the
        result's block there; an operand split otherwise than the result is refused, as the
        simulator's `aligned` refuses it (its CTA's block is not the one the result needs)."""
        held = self.splits(index)
        wanted = canonical_splits(self.out_fields[0], self.where, EXIT)
        cuts = {}
        for axis, result_axis in enumerate(axes):
            want = () if result_axis is None else tuple(wanted.get(result_axis, ()))
            have = tuple(held.get(axis, ()))
            if have == want:
                continue
            if have:
                raise UnsupportedError(
                    f"{self.where}: operand {index} is split over the CTAs along axis {axis} "
                    "otherwise than the result, so a CTA's block of it is not the block the "
                    "result needs; reshard it like the result (or to Broadcast) first"
                )
            cuts[axis] = want
        value = self.args[index]
        return self.body.take_blocks(value, cuts) if cuts else value

    def local_result(self, operands: Sequence[Any]) -> Any:
        """The op's PALLAS rule on `operands` (this CTA's shares), typed at the result's
        per-CTA block."""
        blocks = [
            local_block(shape, canonical_splits(type_, self.where, EXIT), self.body.mesh)
            for type_, shape in zip(fields(self.out_type), self.out_shapes, strict=True)
        ]
        local_out = _plain(self.out_type, blocks)
        return self.body.local(self.op, tuple(operands), self.arg_types, local_out)

    def reshard(self, value: Any) -> Any:
        """A Reshard inside the kernel: a storage change is the value itself (smem/rmem are
        where the kernel keeps it, not a copy it makes); a split the operand lacks is this CTA's
        block of it; gathering blocks from other CTAs is refused (CTAs do not exchange data)."""
        source, target = self.arg_types[0], self.out_type
        held = canonical_splits(source, self.where, EXIT)
        wanted = canonical_splits(target, self.where, EXIT)
        for axis, mesh_axes in held.items():
            if wanted.get(axis) != mesh_axes:
                labels = ", ".join(mesh_axis_label(self.body.mesh, a) for a in mesh_axes)
                raise UnsupportedError(
                    f"{self.where}: gathers logical axis {axis}, split over the CTAs on "
                    f"{labels}, into another layout; the CTAs of one pallas_call do not exchange "
                    "data; keep the split (reshard only the storage) or reshard after the kernel"
                )
        cuts = {axis: axes for axis, axes in wanted.items() if axis not in held}
        return self.body.take_blocks(value, cuts) if cuts else value


def check_rules(op: Op, on_mesh: bool) -> None:
    """The op has the rules this exit needs for it (fails closed, naming the op)."""
    cls = type(op)
    if not PALLAS.has(cls):
        raise UnsupportedError(
            f"{cls.__name__}: {EXIT} has no kernel rule for this op; run the program on the "
            "reference evaluator or XLA, or write the kernel without it"
        )
    if on_mesh and SHARDED_EVAL.has(cls) and not PALLAS_SHARDED.has(cls):
        raise UnsupportedError(
            f"{cls.__name__}: on a cta mesh this op is more than its kernel run on each CTA's "
            f"block, and {EXIT} has no PALLAS_SHARDED rule for it; keep its operands unsharded "
            "inside the kernel"
        )


def refuse_partials(op: Op, arg_types: Sequence[Type], out_type: Type) -> None:
    """A Partial over CTAs: its addends live in different program instances."""
    labelled = [(f"operand {i}", t) for i, a in enumerate(arg_types) for t in fields(a)]
    labelled += [("its result", t) for t in fields(out_type)]
    for what, type_ in labelled:
        partials = pending_partials(type_)
        if partials:
            axis, reduction = next(iter(partials.items()))
            raise UnsupportedError(
                f"{type(op).__name__}: {what} is Partial({reduction}) over the CTAs on "
                f"{mesh_axis_label(type_.layout.mesh, axis)}; its addends live in different "
                "CTAs, and completing them needs a second pass or atomics, which one "
                f"pallas_call does not express; split the contraction dim inside each CTA "
                "instead (a tile loop over it), so that no Partial crosses the CTAs"
            )


def _load(kx: KernelNamespace, value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_load(kx, v) for v in value)
    return kx.load(value)


def _value_shape(value: Any) -> tuple[int, ...]:
    return tuple(value.ref.shape if isinstance(value, KernelRef) else value.shape)


def _local_type(value: Any, declared: Type) -> Type:
    """The declared type of an operand with this CTA's shape and no layout."""
    if isinstance(declared, TupleType):
        return TupleType(
            tuple(_local_type(v, t) for v, t in zip(value, declared.fields, strict=True))
        )
    return TensorType(_value_shape(value), declared.dtype, None, declared.storage)


def _plain(type_: Type, shapes: Sequence[tuple[int, ...]]) -> Type:
    """`type_` with concrete shapes and no layout (what a rule runs with)."""
    leaves = iter(shapes)

    def rebuild(t: Type) -> Type:
        if isinstance(t, TupleType):
            return TupleType(tuple(rebuild(f) for f in t.fields))
        return TensorType(next(leaves), t.dtype, None, t.storage)

    return rebuild(type_)


def _check_shapes(where: str, result: Any, type_: Type) -> None:
    if isinstance(type_, TupleType):
        if not isinstance(result, tuple) or len(result) != len(type_.fields):
            raise InternalCompilerError(f"{where}: the PALLAS rule returned {type(result)}")
        for r, t in zip(result, type_.fields, strict=True):
            _check_shapes(where, r, t)
        return
    if tuple(result.shape) != tuple(type_.shape):
        raise InternalCompilerError(
            f"{where}: the PALLAS rule returned shape {list(result.shape)} but the call's local "
            f"type is {type_}"
        )
