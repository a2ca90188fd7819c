"""Walking HIR bodies: operand order, and whole-body checks no single node's rule can make."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

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


_Walk = TypeVar("_Walk")


def run_suspended_walks(
    pending: list[_Walk],
    advance: Callable[[_Walk], _Walk | None],
    finish: Callable[[_Walk], Any],
    resume: Callable[[_Walk, Any], None],
) -> Any:
    """Drive nested @func calls without recursion (issue 20): `advance(walk)` walks until it is
    done (None) or needs a callee's result (returns the callee's walk, pushed on `pending`);
    a finished walk's `finish` result is handed to its caller by `resume(caller, result)`; the
    outermost walk's result is returned. The depth of nested calls costs heap, not Python
    frames. `pending` is the caller's list, so an error handler can read the calls in flight."""
    while True:
        current = pending[-1]
        callee = advance(current)
        if callee is not None:
            pending.append(callee)
            continue
        pending.pop()
        result = finish(current)
        if not pending:
            return result
        resume(pending[-1], result)


def iter_nodes(
    root: Expr, operands: Callable[[Expr], tuple[Expr, ...]] = all_operands
) -> Iterator[Expr]:
    """Every node reachable from `root` through `operands` (by default loop bodies included),
    each once, in no particular order but always the same one, without recursion."""
    seen: set[Expr] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(operands(node))


def _callees(fn: Function) -> list[Function]:
    """The Functions `fn` reaches directly: its variants and the targets of its calls."""
    from tilefoundry.ir.hir.function import Function  # function.py imports this module

    found = list(fn.variants)
    if fn.body is not None:
        found += [
            n.target
            for n in iter_nodes(fn.body)
            if isinstance(n, Call) and isinstance(n.target, Function)
        ]
    return found


def callees_first(root: Function) -> list[Function]:
    """`root` and every Function it reaches through calls and variants, each once, callees
    before callers (`root` last), found without recursion."""
    order: list[Function] = []
    entered: set[Function] = set()  # a call cycle is entered once, never looped through
    stack: list[tuple[Function, bool]] = [(root, False)]
    while stack:
        fn, expanded = stack.pop()
        if expanded:
            order.append(fn)
            continue
        if fn in entered:
            continue
        entered.add(fn)
        stack.append((fn, True))
        stack.extend((c, False) for c in reversed(_callees(fn)) if c not in entered)
    return order


def call_depth(root: Function) -> int:
    """The longest chain of nested calls from `root` (1 for a function that calls none)."""
    depth: dict[Function, int] = {}
    for fn in callees_first(root):
        depth[fn] = 1 + max((depth.get(c, 0) for c in _callees(fn)), default=0)
    return depth[root]


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
