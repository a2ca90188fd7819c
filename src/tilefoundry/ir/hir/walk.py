"""Walking HIR bodies: operand order, and whole-body checks no single node's rule can make."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Expr, Tuple, source_span
from tilefoundry.ir.hir.dispatch import input_dim_vars
from tilefoundry.ir.hir.grid_region import GridRegionExpr
from tilefoundry.ir.types import dim_vars

if TYPE_CHECKING:
    from tilefoundry.ir.hir.function import Function


def block_operands(node: Expr) -> tuple[Expr, ...]:
    """The operands a node reads in its own block (a loop's body is a block of its own)."""
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Tuple):
        return node.elements
    if isinstance(node, GridRegionExpr):
        return node.init_args
    return ()


def all_operands(node: Expr) -> tuple[Expr, ...]:
    """Every node `node` needs, loop bodies included (a callee's body is the callee's business)."""
    if isinstance(node, GridRegionExpr):
        return (*node.init_args, node.body, *node.yield_values)
    return block_operands(node)


def iter_nodes(root: Expr) -> Iterator[Expr]:
    """Every node reachable from `root` (loop bodies included), each once, without recursion."""
    seen: set[Expr] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(all_operands(node))


def check_loop_bounds_bound(fn: Function) -> None:
    """hir §1.2: every DimVar in a loop's start/extent/step is bound by a parameter shape."""
    bound = set(input_dim_vars(fn).values())
    for node in iter_nodes(fn.body):
        if not isinstance(node, GridRegionExpr):
            continue
        for name in ("start", "extent", "step"):
            for var in dim_vars(getattr(node, name)):
                if var not in bound:
                    raise VerifyError(
                        f"GridRegionExpr: {name} uses DimVar {var.name}, which no parameter "
                        f"shape of Function {fn.name} binds",
                        location=source_span(node),
                    )
