"""Call sites: a @func called from the differentiated function is differentiated through.

Each Call of a Function targets the Function elaborated for that call site's argument types
(hir §1.1), so inlining the target's body at the call site, with its parameters replaced by the
call's arguments, gives the forward program the backward walk differentiates: one body per call
site, typed exactly as that site was. Only calls that read a differentiated value are inlined
(the others stay calls and compute no cotangent); inside a loop body every carry counts as
differentiated, since which carries are is only known once the body is walked. A callee that
calls another is inlined one level per pass, so the depth of nested calls costs passes, not
Python frames. A call of a checkpointed Function (`remat.checkpoint`) stays a call: the backward
recomputes its body where it differentiates it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tilefoundry.analysis import TypeInferContext
from tilefoundry.autodiff.remat import is_checkpointed
from tilefoundry.autodiff.rewrite import rebuilt, substitute
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Call, Expr, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr


def inline_differentiated_calls(root: Expr, wrt: Iterable[Expr], stop: Iterable[Expr] = ()) -> Expr:
    """`root` with every Function call that reads a value depending on `wrt` inlined (the graph
    below the values of `stop` is left as it is)."""
    wrt, stop = frozenset(wrt), frozenset(stop)
    while True:
        inlined = _inline_once(root, wrt, stop)
        if inlined is root:
            return root
        root = inlined


def _inline_once(root: Expr, wrt: frozenset[Expr], stop: frozenset[Expr]) -> Expr:
    ctx = TypeInferContext()
    memo: dict[Expr, Expr] = {}
    order = post_order((root,), lambda n: () if n in stop else n.operands())
    varied: set[Expr] = set(wrt)
    for node in order:
        if isinstance(node, GridRegionExpr):
            varied.update(node.carried_args)
    for node in order:
        new = node if node in stop else _copy(node, memo, varied, ctx)
        memo[node] = new
        if node in varied or any(memo.get(o) in varied for o in node.block_operands()):
            varied.add(new)
    return memo[root]


def _copy(node: Expr, memo: dict, varied: set, ctx: TypeInferContext) -> Expr:
    if not isinstance(node, Call):
        return rebuilt(node, memo, ctx)
    args = tuple(memo[a] for a in node.args)
    target = node.target
    reads_varied = any(a in varied for a in args)
    if isinstance(target, FusionRegion) and reads_varied:
        raise UnsupportedError(
            "FusionRegion: reverse mode differentiates the program before `compile` fuses it; "
            "differentiate the source Function, then compile the gradient",
            location=source_span(node),
        )
    if (
        isinstance(target, Function)
        and target.body is not None
        and reads_varied
        and not is_checkpointed(target)
    ):
        memo_body = substitute((target.body,), dict(zip(target.params, args, strict=True)), ctx)
        return memo_body[target.body]
    return rebuilt(node, memo, ctx)
