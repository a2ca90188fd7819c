"""Walking HIR programs: the call graph, suspended walks, and whole-body checks no single node's
rule can make (the graph walks themselves are `ir.core.graph`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, source_span
from tilefoundry.ir.core.graph import iter_nodes, post_order
from tilefoundry.ir.hir.dispatch import input_dim_vars
from tilefoundry.ir.hir.grid_region import GridRegionExpr
from tilefoundry.ir.types import dim_vars

if TYPE_CHECKING:
    from tilefoundry.ir.hir.function import Function


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
    before callers (`root` last), found without recursion (a call cycle is entered once)."""
    return post_order((root,), _callees)


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
