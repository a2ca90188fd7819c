"""The reference evaluator's DAG walk (DESIGN §3 `evaluate`, hir §1.1–§1.2).

A body is a DAG whose sharing is node identity, so every node is computed once per activation and
memoised on the node itself. Loops complicate that one way: a node inside a loop body is
recomputed each iteration only when it depends on that loop's induction variable or carries;
loop-invariant nodes belong to the enclosing activation and are computed once. Each activation
is a chain of frames; a node is memoised in the innermost frame whose loop variables it uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.caches import Memo
from tilefoundry.errors import (
    EvalError,
    InternalCompilerError,
    TileFoundryError,
    UnsupportedError,
    VerifyError,
    format_location,
)
from tilefoundry.evaluator.boundary import (
    place_input,
    read_result,
)
from tilefoundry.evaluator.dtypes import check_dtype
from tilefoundry.evaluator.layouts import has_physical_layout
from tilefoundry.evaluator.mesh_sim import ShardedCall, as_typed, run_call, touches_mesh
from tilefoundry.evaluator.op_calls import OpCallSite, checked, expected_of
from tilefoundry.evaluator.static_shapes import bind, static_signature
from tilefoundry.evaluator.straight_line import Step, StepKind, straight_line
from tilefoundry.evaluator.values import scatter
from tilefoundry.ir.core import Call, Constant, Expr, Op, SourceSpan, Tuple, Var, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, iter_nodes
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr, elaborate, select_variant
from tilefoundry.ir.hir.facts import loop_reads
from tilefoundry.ir.hir.footprint import check_memory, memory_setting
from tilefoundry.ir.hir.signature import Bindings, check_arguments
from tilefoundry.ir.hir.walk import run_suspended_walks
from tilefoundry.ir.types import TensorType, TupleType, Type, resolve_dim
from tilefoundry.ir.types.shard import ShardLayout


class _Frame:
    """One activation (a function call) or one loop iteration inside it."""

    def __init__(
        self,
        parent: _Frame | None,
        variables: dict[Var, Any],
        bindings: Bindings,
        loop_vars: frozenset[Var] | None = None,
        scope: Function | None = None,
    ):
        self.parent, self.variables, self.bindings = parent, variables, bindings
        self.loop_vars = loop_vars
        self.scope = scope if scope is not None else parent.scope
        """The Function whose body runs here (a loop iteration runs its function's body)."""
        self.memo: dict[Expr, Any] = {}
        self.dying: dict[Expr, int] | None = None  # reads left per node, in a loop-free walk

    def lookup(self, var: Var) -> Any:
        frame: _Frame | None = self
        while frame is not None:
            if var in frame.variables:
                return frame.variables[var]
            frame = frame.parent
        raise EvalError(f"Var '{var.name}' is not bound here (neither a parameter nor a loop var)")

    def owner(self, node: Expr) -> _Frame:
        """The frame that memoises `node`: the innermost whose loop variables it reads."""
        frame = self
        if frame.loop_vars is None:
            return frame
        free = loop_reads(frame.scope).of(node)
        while frame.loop_vars is not None and not (free & frame.loop_vars):
            frame = frame.parent
        return frame


def concrete_shape(type_: TensorType, bindings: Bindings, where: str) -> tuple[int, ...]:
    try:
        return tuple(d if isinstance(d, int) else resolve_dim(d, bindings) for d in type_.shape)
    except VerifyError as err:
        raise EvalError(f"{where}: cannot resolve the shape {list(type_.shape)}: {err}") from None


def concrete_type(type_: Type, bindings: Bindings, where: str) -> Type:
    """`type_` with every dim resolved; a plain layout over symbolic dims is dropped, since a
    kernel reads only shapes and dtypes from its `out_type`."""
    if isinstance(type_, TupleType):
        return TupleType(tuple(concrete_type(f, bindings, where) for f in type_.fields))
    shape = concrete_shape(type_, bindings, where)
    if shape == type_.shape:
        return type_
    layout = type_.layout if isinstance(type_.layout, ShardLayout) else None
    return TensorType(shape, type_.dtype, layout, type_.storage)


_TYPED = Memo("evaluator: typed functions", 1024)
"""id(fn) of each Function typed in this process (while it lives)."""


class _Activation:
    """One pending walk of `root` in `frame` on the evaluator's explicit call stack: its own
    work stack, its last-use counts, and the call node (with the frame memoising it) it waits
    on while a callee runs."""

    def __init__(self, root: Expr, frame: _Frame, remaining: dict[Expr, int] | None):
        self.root, self.frame, self.remaining = root, frame, remaining
        self.stack: list[tuple[Expr, bool]] = [(root, False)]
        self.waiting: tuple[Expr, _Frame] | None = None

    def store(self, node: Expr, owner: _Frame, value: Any) -> None:
        owner.memo[node] = value
        if self.remaining is not None:
            _release(node, self.root, self.remaining, owner.memo)

    def returned(self, value: Any) -> None:
        """The callee this activation waited on returned `value`: memoise it on the call."""
        node, owner = self.waiting
        self.waiting = None
        self.store(node, owner, value)

    def result(self) -> Any:
        return self.frame.owner(self.root).memo[self.root]


class Interpreter:
    """Evaluates Function bodies on evaluator values (ndarrays, MeshValues, tuples)."""

    def __init__(self) -> None:
        self._reads: dict[Expr, dict[Expr, int] | None] = {}
        self._sites: dict[Expr, OpCallSite] = {}
        self._plans: dict[Expr, list[Step] | None] = {}

    @staticmethod
    def ensure_typed(fn: Function) -> None:
        """Type `fn` once per process, not once per `evaluate` call (its nodes are immutable and
        keep their stamped types)."""
        if _TYPED.get(id(fn)) is None:
            TypeInferContext().infer(fn)
            _TYPED.put(id(fn), True, owner=fn)

    def invoke(self, fn: Function, values: Sequence[Any]) -> tuple[Function, Any]:
        """Run `fn` (a dispatch base selects its variant) on values; returns (body fn, value)."""
        fn, frame = self._enter(fn, values)
        return fn, self.value(fn.body, frame)

    def _enter(self, fn: Function, values: Sequence[Any]) -> tuple[Function, _Frame]:
        """The activation `fn` runs in on `values`: arity checked, DimVars bound, the variant a
        dispatch base selects, typed once; returns (body fn, its root frame)."""
        if len(values) != len(fn.params):
            raise EvalError(
                f"Function {fn.name}: expected {len(fn.params)} argument(s) "
                f"({', '.join(p.name for p in fn.params)}), got {len(values)}"
            )
        bindings = bind(fn, values)
        if fn.is_dispatch_base:
            fn = select_variant(fn, bindings={var.name: n for var, n in bindings.items()})
        self.ensure_typed(fn)
        return fn, _Frame(None, dict(zip(fn.params, values, strict=True)), bindings, scope=fn)

    # -- the walk ----------------------------------------------------------------------------

    def value(self, root: Expr, frame: _Frame) -> Any:
        """The value of `root` in `frame`. A loop-free body made only of op calls runs from its
        plan (`straight_line`). Otherwise the body is walked; a call of a @func does not recurse:
        the callee's body becomes a new activation on an explicit stack and the caller resumes
        when it returns, so the depth of nested calls costs heap, not Python frames (issue 20)."""
        if frame.loop_vars is None and not frame.memo:
            if root not in self._plans:
                self._plans[root] = straight_line(root)
            plan = self._plans[root]
            if plan is not None:
                return self._run(plan, frame)
        return run_suspended_walks(
            [self._activation(root, frame)],
            self._advance,
            _Activation.result,
            _Activation.returned,
        )

    def _activation(self, root: Expr, frame: _Frame) -> _Activation:
        remaining = self._remaining_reads(root) if frame.loop_vars is None else None
        return _Activation(root, frame, remaining)

    def _advance(self, act: _Activation) -> _Activation | None:
        """Walk `act` until it is done (None) or needs a @func call's result (the callee's
        activation, whose result `_Activation.returned` later memoises on the call node). While
        it walks, `frame.dying` holds its reads left, so a kernel may write into a value read
        for the last time."""
        frame, stack, remaining = act.frame, act.stack, act.remaining
        outer, frame.dying = frame.dying, remaining
        try:
            while stack:
                node, expanded = stack.pop()
                # An activation's own frame memoises every node (loop frames: see `owner`).
                owner = frame if remaining is not None else frame.owner(node)
                if node in owner.memo:
                    continue
                if not expanded:
                    stack.append((node, True))
                    stack.extend((c, False) for c in node.block_operands())
                    continue
                if isinstance(node, Call) and isinstance(node.target, Function):
                    args = tuple(self._ready(c, frame) for c in node.block_operands())
                    callee = elaborate(node.target, tuple(a.type for a in node.args))
                    body_fn, callee_frame = self._enter(callee, args)
                    act.waiting = (node, owner)
                    return self._activation(body_fn.body, callee_frame)
                act.store(node, owner, self._compute(node, frame))
        finally:
            frame.dying = outer
        return None

    def _run(self, plan: list[Step], frame: _Frame) -> Any:
        """A straight-line body (see `straight_line`) in the walk's own order, with its
        releases and last reads worked out in advance: what the walk does, minus the walking."""
        memo = frame.memo
        for step in plan:
            node = step.node
            if step.kind is StepKind.CALL:
                with _located(node):
                    memo[node] = self._call_op(
                        node, tuple(memo[c] for c in step.operands), frame, step.dying
                    )
            elif step.kind is StepKind.VAR:
                memo[node] = frame.lookup(node)
            elif step.kind is StepKind.CONSTANT:
                memo[node] = self._constant(node)
            else:
                memo[node] = tuple(memo[c] for c in step.operands)
            for done in step.releases:
                del memo[done]
        return memo[plan[-1].node]

    def _remaining_reads(self, root: Expr) -> dict[Expr, int] | None:
        """A fresh copy of `_last_uses(root)`, counted once per root."""
        if root not in self._reads:
            self._reads[root] = _last_uses(root)
        counts = self._reads[root]
        return None if counts is None else dict(counts)

    def _ready(self, node: Expr, frame: _Frame) -> Any:
        if frame.loop_vars is None:  # an activation's own frame memoises every node
            return frame.memo[node]
        return frame.owner(node).memo[node]

    def _compute(self, node: Expr, frame: _Frame) -> Any:
        """Every node but a @func call (which `_advance` turns into a new activation)."""
        if isinstance(node, Var):
            return frame.lookup(node)
        if isinstance(node, Constant):
            return self._constant(node)
        args = tuple(self._ready(c, frame) for c in node.block_operands())
        if isinstance(node, Tuple):
            return args
        if isinstance(node, GridRegionExpr):
            with _located(node):
                return self._loop(node, args, frame)
        if isinstance(node, Call):
            if isinstance(node.target, Op):
                with _located(node):
                    return self._call_op(node, args, frame, frame.dying)
            if isinstance(node.target, FusionRegion):
                return self._fusion(node.target, args, frame)
        raise UnsupportedError(f"{type(node).__name__}: the reference evaluator cannot evaluate it")

    def _fusion(self, region: FusionRegion, args: tuple, frame: _Frame) -> Any:
        """A region is evaluated like a call: its body runs in a fresh activation with its
        inputs bound, so fused and unfused programs execute exactly the same op kernels."""
        variables = dict(zip(region.inputs, args, strict=True))
        inner = _Frame(None, variables, frame.bindings, scope=frame.scope)
        results = tuple(self.value(output, inner) for output in region.outputs)
        return results[0] if len(results) == 1 else results

    def _constant(self, node: Constant) -> Any:
        type_ = node.type
        array = np.asarray(node.value, dtype=check_dtype(type_.dtype, "Constant"))
        if array is node.value:  # a view, so a result that is the constant is copied out
            array = array.view()
        if isinstance(type_.layout, ShardLayout):
            return as_typed(scatter(array, type_, "Constant"), "Constant")
        return array

    def _loop(self, node: GridRegionExpr, inits: tuple, frame: _Frame) -> Any:
        where = "GridRegionExpr"
        bounds = {}
        for name in ("start", "extent", "step"):
            dim = getattr(node, name)
            try:
                bounds[name] = dim if isinstance(dim, int) else resolve_dim(dim, frame.bindings)
            except VerifyError as err:
                raise EvalError(f"{where}: {name} {dim} cannot be resolved: {err}") from None
        if bounds["start"] < 0 or bounds["extent"] < 0:
            raise EvalError(
                f"{where}: start and extent must be non-negative, got start={bounds['start']}, "
                f"extent={bounds['extent']}"
            )
        if bounds["step"] <= 0:
            raise EvalError(f"{where}: step must be positive, got {bounds['step']}")
        if not node.carried_args:
            return ()
        loop_vars = frozenset((node.induction_var, *node.carried_args))
        carry = inits
        for i in range(bounds["start"], bounds["extent"], bounds["step"]):
            variables = {node.induction_var: np.asarray(i, dtype=np.int64)}
            variables.update(zip(node.carried_args, carry, strict=True))
            iteration = _Frame(frame, variables, frame.bindings, loop_vars)
            self.value(node.body, iteration)
            carry = tuple(self.value(y, iteration) for y in node.yield_values)
        return carry[0] if len(carry) == 1 else carry

    def _call_op(
        self, call: Call, args: tuple, frame: _Frame, dying: dict[Expr, int] | None
    ) -> Any:
        """`call`'s op on `args`; `dying` maps a node to 1 when this call is its last read."""
        site = self._sites.get(call)
        if site is None:
            site = self._sites[call] = OpCallSite(call)
        out_type, where = site.out_type, site.where
        on_mesh = not site.replicated or (
            not all(type(a) is np.ndarray for a in args) and touches_mesh(args, out_type)
        )
        if on_mesh:
            fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
            shapes = [concrete_shape(f, frame.bindings, where) for f in fields]
            arg_types = tuple(a.type for a in call.args)
            return run_call(ShardedCall(site.op, args, arg_types, out_type, shapes))
        if site.static:
            concrete, expected = out_type, site.expected
        else:
            concrete = concrete_type(out_type, frame.bindings, where)
            expected = expected_of(concrete)
        return checked(site.run(call, args, concrete, dying), expected, concrete, where)


def _last_uses(root: Expr) -> dict[Expr, int] | None:
    """How many reads of each node the walk from `root` makes, so an intermediate can be dropped
    after its last read (numpy then reuses its memory instead of faulting in fresh pages); None
    when a loop is under `root` (a loop body reads outer values the count does not see)."""
    counts: dict[Expr, int] = {}
    for node in iter_nodes(root, edges=BLOCK_OPERANDS):
        if isinstance(node, GridRegionExpr):
            return None
        for operand in node.block_operands():
            counts[operand] = counts.get(operand, 0) + 1
    return counts


def _release(node: Expr, root: Expr, remaining: dict[Expr, int], memo: dict[Expr, Any]) -> None:
    """`node` was just computed: its operands have one read fewer to go; drop the ones done."""
    for operand in node.block_operands():
        left = remaining[operand] - 1
        remaining[operand] = left
        if left == 0 and operand is not root:
            memo.pop(operand, None)


class _located:
    """Adds the source location of `node` (where the user wrote the call) to a refusal or an
    evaluation error raised while evaluating it; an error located already keeps its location.
    A bare Python error from a kernel or a simulation rule is our bug, never the program's: it
    becomes an InternalCompilerError naming the op and the call on its first line (the one line
    the CLI prints), the original chained for the traceback. Running out of stack or memory is
    no bug of one call and passes through."""

    def __init__(self, node: Expr):
        self.node = node

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, traceback) -> bool:
        if err is None or getattr(err, "located", False):
            return False
        span = source_span(self.node)
        if not isinstance(err, TileFoundryError):
            if not isinstance(err, Exception) or isinstance(err, RecursionError | MemoryError):
                return False
            located = InternalCompilerError(_internal_failure(self.node, err, span))
            located.located = True
            raise located.with_traceback(traceback) from err
        if span is None:
            return False
        if isinstance(err, VerifyError):
            located = err.with_location(span)
        elif isinstance(err, EvalError | InternalCompilerError):
            located = type(err)(f"{err}\n  at {format_location(span)}")
        else:
            return False
        located.located = True
        raise located.with_traceback(traceback) from err.__cause__


def _internal_failure(node: Expr, err: Exception, span: SourceSpan | None) -> str:
    what = type(node.target).__name__ if isinstance(node, Call) else "the loop"
    where = f" at {format_location(span)}" if span is not None else ""
    detail = str(err).splitlines()[0] if str(err) else ""
    return f"{what}{where}: the simulator failed on this call ({type(err).__name__}: {detail})"


def evaluate(fn: Function, *arrays: Any, complete_partials: bool = False) -> Any:
    """Run `fn` on global arrays (DESIGN §3): one per parameter, sharded ones scattered over
    their mesh, results gathered back; a Partial result is completed only on request."""
    if not isinstance(fn, Function):
        raise EvalError(f"evaluate: expected a hir Function, got {type(fn).__name__}")
    prepared = _prepared(fn)
    interpreter = prepared.interpreter
    checked, bindings = prepared.check_arguments(fn, arrays)
    prepared.check_memory(fn, bindings)
    placed = checked
    if prepared.places:
        pairs = enumerate(zip(fn.params, checked, strict=True))
        placed = [place_input(fn.name, param, array, i) for i, (param, array) in pairs]
    body_fn, result = interpreter.invoke(fn, placed)
    return read_result(
        result,
        body_fn.body.type,
        f"Function {fn.name}: result",
        complete_partials=complete_partials,
        borrowed=list(checked),
    )


class _Prepared:
    """What `evaluate` works out once per Function, not once per call: the function typed, an
    Interpreter whose caches (read counts, plans, call sites: facts of the immutable IR)
    persist, and the bindings whose memory check passed under the current memory limit
    setting. It does not hold the Function (its cache entry goes with it)."""

    def __init__(self, fn: Function):
        Interpreter.ensure_typed(fn)
        self.interpreter = Interpreter()
        self._fits: set[tuple] = set()
        self._signature = static_signature(fn)
        self.places = any(
            isinstance(p.type, TensorType)
            and (isinstance(p.type.layout, ShardLayout) or has_physical_layout(p.type))
            for p in fn.params
        )

    def check_arguments(
        self, fn: Function, arrays: tuple
    ) -> tuple[tuple[np.ndarray, ...], Bindings]:
        """`check_arguments`' result. When every parameter has a static shape, arrays that are
        already ndarrays of exactly the parameters' shapes and dtypes are what it would return
        (with no DimVar to bind); anything else takes the general check and its messages."""
        signature = self._signature
        if signature is not None and len(arrays) == len(signature):
            for array, (shape, dtype) in zip(arrays, signature, strict=True):
                if type(array) is not np.ndarray or array.shape != shape or array.dtype != dtype:
                    break
            else:
                return arrays, {}
        return check_arguments(fn.name, fn.params, arrays, "evaluate", check_dtype)

    def check_memory(self, fn: Function, bindings: Bindings) -> None:
        key = (tuple(bindings.items()), memory_setting())
        if key not in self._fits:
            check_memory(fn, bindings, "evaluate")
            self._fits.add(key)


_PREPARED = Memo("evaluator: prepared functions", 1024)


def _prepared(fn: Function) -> _Prepared:
    """`fn`'s `_Prepared`, kept per process while fn lives."""
    prepared = _PREPARED.get(id(fn))
    if prepared is None:
        prepared = _PREPARED.put(id(fn), _Prepared(fn), owner=fn)
    return prepared
