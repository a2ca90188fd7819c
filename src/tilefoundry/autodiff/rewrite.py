"""Rebuilding a graph with some of its nodes replaced: what reverse mode does to a program.

Three steps of the transform are one substitution each: inlining a callee (its parameters replaced
by the call's arguments), replaying a loop body in the backward loop (its carries replaced by the
values the backward loop reads back, its induction variable by the reversed one), and swapping a
differentiated loop for the loop that also stacks what its backward reads. A node none of whose
operands changed is kept (the rebuilt graph shares every untouched node), a changed Call keeps its
target and metadata and is re-typed only when an operand's type changed (`copy_call`), and a loop
is rebuilt around its rebuilt body with its own Vars.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Constant, Expr, Tuple, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.passes.graph import copy_call, typed_node


def substitute(
    roots: Iterable[Expr],
    replacements: Mapping[Expr, Expr],
    ctx: TypeInferContext,
    stop: Iterable[Expr] = (),
) -> dict[Expr, Expr]:
    """Old node -> rebuilt node for every node under `roots`, each node of `replacements`
    replaced by its value. Nodes in `stop` (values known not to read a replaced node, such as a
    loop's invariant inputs) are kept without walking below them."""
    memo: dict[Expr, Expr] = dict(replacements)
    kept = frozenset(stop)

    def operands(node: Expr) -> tuple[Expr, ...]:
        return () if node in memo or node in kept else node.operands()

    for node in post_order(tuple(roots), operands):
        if node not in memo:
            memo[node] = node if node in kept else rebuilt(node, memo, ctx)
    return memo


def rebuilt(node: Expr, memo: Mapping[Expr, Expr], ctx: TypeInferContext) -> Expr:
    """`node` over its operands' rebuilt values (`memo`); `node` itself when none changed."""
    if isinstance(node, Var | Constant):
        return node
    if isinstance(node, Call):
        return copy_call(node, tuple(memo[a] for a in node.args), ctx)
    if isinstance(node, Tuple):
        elements = tuple(memo[e] for e in node.elements)
        if _same(elements, node.elements):
            return node
        return typed_node(Tuple(elements, metadata=node.metadata), ctx)
    if isinstance(node, GridRegionExpr):
        parts = (*node.init_args, node.body, *node.yield_values)
        new = tuple(memo[p] for p in parts)
        if _same(new, parts):
            return node
        count = len(node.init_args)
        loop = GridRegionExpr(
            node.induction_var, node.carried_args, new[:count], new[count],
            new[count + 1:], node.extent, node.step, node.start, metadata=node.metadata,
        )  # fmt: skip
        return typed_node(loop, ctx)
    return node


def _same(new: tuple[Expr, ...], old: tuple[Expr, ...]) -> bool:
    return all(a is b for a, b in zip(new, old, strict=True))
