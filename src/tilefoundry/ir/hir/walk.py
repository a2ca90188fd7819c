"""Whole-body checks on a Function that no single node's typeinfer rule can make."""

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
        if isinstance(node, Call):
            stack.extend(node.args)
        elif isinstance(node, Tuple):
            stack.extend(node.elements)
        elif isinstance(node, GridRegionExpr):
            stack.extend((*node.init_args, node.body, *node.yield_values))


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
