"""Call sites: a @func called from the differentiated function is differentiated through.

Each Call of a Function targets the Function elaborated for that call site's argument types
(hir §1.1), so inlining the target's body at the call site, with its parameters replaced by the
call's arguments, gives the forward program the backward walk differentiates: one body per call
site, typed exactly as that site was. Only calls that read a differentiated value are inlined
(the others stay calls and compute no cotangent); a callee that calls another is inlined one level
per pass, so the depth of nested calls costs passes, not Python frames.
"""

from __future__ import annotations

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Call, Constant, Expr, Tuple, Var, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.passes.graph import copy_call, typed_node


def inline_differentiated_calls(root: Expr, wrt: frozenset[Var]) -> Expr:
    """`root` with every Function call that reads a value depending on `wrt` inlined."""
    while True:
        inlined = _inline_once(root, wrt)
        if inlined is root:
            return root
        root = inlined


def _inline_once(root: Expr, wrt: frozenset[Var]) -> Expr:
    ctx = TypeInferContext()
    memo: dict[Expr, Expr] = {}
    varied: set[Expr] = set(wrt)
    for node in post_order((root,)):
        new = _copy(node, memo, varied, ctx)
        memo[node] = new
        if node in varied or any(memo.get(o) in varied for o in node.block_operands()):
            varied.add(new)
    return memo[root]


def _copy(node: Expr, memo: dict, varied: set, ctx: TypeInferContext) -> Expr:
    if isinstance(node, Var | Constant):
        return memo.get(node, node)
    if isinstance(node, Tuple):
        elements = tuple(memo[e] for e in node.elements)
        if all(a is b for a, b in zip(elements, node.elements, strict=True)):
            return node
        return typed_node(Tuple(elements, metadata=node.metadata), ctx)
    if isinstance(node, GridRegionExpr):
        parts = (*node.init_args, node.body, *node.yield_values)
        if any(memo[p] is not p for p in parts):
            raise UnsupportedError(
                "GridRegionExpr: reverse-mode differentiation through a loop that reads a "
                "differentiated value (or calls a @func that does) is not supported yet; write "
                "the iterations out as calls of one @func, or differentiate one iteration",
                location=source_span(node),
            )
        return node
    if not isinstance(node, Call):
        return node
    args = tuple(memo[a] for a in node.args)
    target = node.target
    if isinstance(target, FusionRegion) and any(a in varied for a in args):
        raise UnsupportedError(
            "FusionRegion: reverse mode differentiates the program before `compile` fuses it; "
            "differentiate the source Function, then compile the gradient",
            location=source_span(node),
        )
    if isinstance(target, Function) and target.body is not None and any(a in varied for a in args):
        return _inlined_body(target, args, ctx)
    return copy_call(node, args, ctx)


def _inlined_body(callee: Function, args: tuple[Expr, ...], ctx: TypeInferContext) -> Expr:
    """The callee's body with its parameters replaced by `args` (nested calls left as calls)."""
    memo: dict[Expr, Expr] = dict(zip(callee.params, args, strict=True))
    for node in post_order((callee.body,)):
        if node in memo:
            continue
        if isinstance(node, GridRegionExpr):
            raise UnsupportedError(
                f"GridRegionExpr: @func {callee.name} holds a loop, and reverse-mode "
                "differentiation through a loop is not supported yet; write its iterations out",
                location=source_span(node),
            )
        if isinstance(node, Tuple):
            memo[node] = typed_node(Tuple(tuple(memo[e] for e in node.elements)), ctx)
        elif isinstance(node, Call):
            memo[node] = copy_call(node, tuple(memo[a] for a in node.args), ctx)
        else:
            memo[node] = node
    return memo[callee.body]
