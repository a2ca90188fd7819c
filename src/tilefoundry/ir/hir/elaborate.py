"""hir §1.1 Call typing by elaboration, and the typeinfer rules of Function.

`elaborate(callee, arg_types)` binds each parameter to its argument's type and rebuilds the body
under that binding, re-typing every rebuilt node once, so a layout (sharding, Partial states
included) that enters through a layout-unconstrained parameter flows through every op rule to the
return. Nothing is rebuilt when the binding changes nothing (the callee itself is returned), a
dispatch prototype is never rebuilt (its call has the declared return type), and within one
construction session the same (callee, bound types) always yields the identical instance, so a
printer keyed on identity shows one node per distinct specialization.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar, Token

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Tuple, Var, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order, right_to_left
from tilefoundry.ir.hir.function import Function
from tilefoundry.ir.hir.grid_region import GridRegionExpr
from tilefoundry.ir.hir.signature import bind_arguments, type_mismatch
from tilefoundry.ir.hir.walk import check_loop_bounds_bound
from tilefoundry.ir.types import Type
from tilefoundry.rules import register_callee_typeinfer, register_typeinfer

_RIGHT_TO_LEFT = right_to_left(BLOCK_OPERANDS)
"""A body is rebuilt last operand first, the order typeinfer types operands in, so a rebuild
meets a body's errors in the order typing it does."""

_SESSION: ContextVar[dict | None] = ContextVar("tilefoundry_elaboration_session", default=None)


class ElaborationSession:
    """A construction session (the frontend opens one per parse): every elaboration inside shares
    one memo, which is discarded on exit so nothing carries across sessions."""

    def __init__(self) -> None:
        self.memo: dict = {}
        self._token: Token | None = None

    def __enter__(self) -> ElaborationSession:
        self._token = _SESSION.set(self.memo)
        return self

    def __exit__(self, *exc_info: object) -> None:
        _SESSION.reset(self._token)


def elaborate(callee: Function, arg_types: Sequence[Type]) -> Function:
    """The concrete Function a call of `callee` with `arg_types` targets (hir §1.1)."""
    if not isinstance(callee, Function):
        raise VerifyError(f"elaborate: the callee must be a Function, got {callee!r}")
    done, bound = _unchanged(callee, arg_types)
    if done is not None:
        return done
    memo = _SESSION.get()
    if memo is None:
        with ElaborationSession() as session:
            return _memoized(session.memo, callee, bound)
    return _memoized(memo, callee, bound)


def _unchanged(callee: Function, arg_types: Sequence[Type]) -> tuple[Function | None, tuple]:
    """(`callee` itself when the call rebuilds nothing, else None; the bound parameter types)."""
    bound = bind_arguments(callee.name, callee.params, tuple(arg_types))
    if callee.body is None:
        if not callee.variants:
            raise VerifyError(
                f"Function {callee.name}: has no body and no variants, so it cannot be called"
            )
        return callee, bound
    if bound == tuple(p.type for p in callee.params):
        return callee, bound
    return None, bound


class _NeedsElaboration(Exception):
    """Raised by a rebuild that reached a call whose callee is not elaborated yet: the callee
    is elaborated first (on `_memoized`'s explicit stack) and the rebuild then resumes."""

    def __init__(self, key: tuple[Function, tuple]):
        super().__init__(key[0].name)
        self.key = key


def _memoized(memo: dict, callee: Function, bound: tuple[Type, ...]) -> Function:
    """The instance for (callee, bound), elaborating every callee it needs first without
    recursion: a chain of 2,000 nested calls costs no Python frames per level (issue 20)."""
    key = (callee, bound)
    pending = [key]
    rebuilds: dict[tuple, _Rebuilder] = {}
    while pending and key not in memo:
        top = pending[-1]
        if top in memo:
            pending.pop()
            continue
        if top not in rebuilds:
            rebuilds[top] = _start(top[0], top[1], memo)
        try:
            memo[top] = _finish(rebuilds[top])
        except _NeedsElaboration as need:
            if need.key in pending:
                raise VerifyError(
                    f"Function {need.key[0].name}: calls itself; recursion is not supported",
                    location=source_span(need.key[0]),
                ) from None
            pending.append(need.key)
            continue
        del rebuilds[top]
        pending.pop()
    return memo[key]


def _start(callee: Function, bound: tuple[Type, ...], memo: dict) -> _Rebuilder:
    ctx = TypeInferContext()
    params = tuple(
        Var(p.name, t, metadata=p.metadata) for p, t in zip(callee.params, bound, strict=True)
    )
    return _Rebuilder(callee, ctx, dict(zip(callee.params, params, strict=True)), memo)


def _finish(rebuilder: _Rebuilder) -> Function:
    """Rebuild (or resume rebuilding) the body; raises _NeedsElaboration for a callee first."""
    callee, ctx = rebuilder.fn, rebuilder.ctx
    body = rebuilder.rebuild(callee.body)
    body_type = ctx.infer(body)
    _check_return(callee, body_type)
    params = tuple(rebuilder.memo[p] for p in callee.params)
    return Function(
        callee.name,
        params,
        body,
        body_type,
        specializations=callee.specializations,
        label=callee.label,
        metadata=callee.metadata,
    )


def _check_return(fn: Function, body_type: Type) -> None:
    reason = type_mismatch(fn.return_type, body_type)
    if reason is not None:
        raise VerifyError(
            f"Function {fn.name}: the body's type does not match the declared return type: "
            f"{reason}",
            location=source_span(fn),
        )


class _Rebuilder:
    """Copies a body DAG under new parameter Vars, preserving sharing, typing each copy once."""

    def __init__(
        self, fn: Function, ctx: TypeInferContext, mapping: dict[Expr, Expr], elaborated: dict
    ):
        self.fn = fn
        self.ctx = ctx
        self.memo = mapping
        self.elaborated = elaborated
        """The session's (callee, bound types) -> instance memo, where callees are looked up."""

    def rebuild(self, root: Expr) -> Expr:
        memo = self.memo
        for node in post_order((root,), _RIGHT_TO_LEFT, done=memo):
            if node not in memo:  # a loop's rebuild may have copied a value its body shares
                new = self._copy(node)
                self.ctx.infer(new)
                memo[node] = new
        return memo[root]

    def _copy(self, node: Expr) -> Expr:
        if isinstance(node, Call):
            args = tuple(self.memo[a] for a in node.args)
            target = node.target
            if isinstance(target, Function):
                done, bound = _unchanged(target, tuple(self.ctx.infer(a) for a in args))
                if done is None:
                    done = self.elaborated.get((target, bound))
                if done is None:
                    raise _NeedsElaboration((target, bound))
                target = done
            return Call(target, args, metadata=node.metadata)
        if isinstance(node, Tuple):
            return Tuple(tuple(self.memo[e] for e in node.elements), metadata=node.metadata)
        if isinstance(node, Constant):
            return node
        if isinstance(node, GridRegionExpr):
            return self._copy_grid(node)
        if isinstance(node, Var):
            raise VerifyError(
                f"Function {self.fn.name}: the body uses Var '{node.name}', which is neither a "
                "parameter nor a loop variable in scope",
                location=source_span(node),
            )
        raise UnsupportedError(f"{type(node).__name__}: elaboration cannot rebuild this node")

    def _copy_grid(self, node: GridRegionExpr) -> GridRegionExpr:
        inits = tuple(self.memo[e] for e in node.init_args)
        if node.induction_var not in self.memo:  # else a rebuild resumed after a callee
            self.memo[node.induction_var] = Var(
                node.induction_var.name, node.induction_var.type, node.induction_var.metadata
            )
            for phi, init in zip(node.carried_args, inits, strict=True):
                self.memo[phi] = Var(phi.name, self.ctx.infer(init), phi.metadata)
        induction = self.memo[node.induction_var]
        phis = tuple(self.memo[phi] for phi in node.carried_args)
        body = self.rebuild(node.body)
        yields = tuple(self.rebuild(y) for y in node.yield_values)
        return GridRegionExpr(
            induction,
            phis,
            inits,
            body,
            yields,
            node.extent,
            node.step,
            node.start,
            metadata=node.metadata,
        )


@register_callee_typeinfer(Function)
def _call_function(callee: Function, arg_types: tuple[Type, ...], ctx: TypeInferContext) -> Type:
    target = elaborate(callee, arg_types)
    if target.body is None:
        return target.return_type
    return target.body.type if target.body.type is not None else ctx.infer(target.body)


@register_typeinfer(Function)
def _function(fn: Function, ctx: TypeInferContext) -> Type:
    if fn.body is not None:
        check_loop_bounds_bound(fn)
        _check_return(fn, ctx.infer(fn.body))
    for variant in fn.variants:
        ctx.infer(variant)
    return fn.type
