"""The `stablehlo.while` both emitters write for a GridRegionExpr: what the loop hoists and
threads through (invariants, captures), its bounds, and its condition and text.

The one-device emitter and the SPMD emitter lower the body each in its own medium (names, or
per-device shards); the loop around it is the same, so it is written once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilefoundry.ir.core import Expr, Var
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.lowering.builder import Lowered, Lowering
from tilefoundry.ir.types import TensorType, i64, resolve_dim


def _reads(expr: Expr, memo: dict[Expr, frozenset[Var]]) -> frozenset[Var]:
    if expr not in memo:
        if isinstance(expr, Var):
            memo[expr] = frozenset((expr,))
        elif isinstance(expr, GridRegionExpr):
            inner = frozenset().union(*(_reads(c, memo) for c in expr.operands()))
            memo[expr] = inner - {expr.induction_var, *expr.carried_args}
        else:
            memo[expr] = frozenset().union(*(_reads(c, memo) for c in expr.operands()))
    return memo[expr]


def loop_invariants(
    loop: GridRegionExpr, done: Mapping[Expr, Any], memo: dict[Expr, frozenset[Var]]
) -> list[Expr]:
    """Body values of `loop` that read none of its variables and are not lowered yet (`done`),
    producers first: lowered before the loop, they run once, not once per iteration."""
    local = {loop.induction_var, *loop.carried_args}
    stack, seen = [loop.body, *loop.yield_values], set()
    order: list[Expr] = []
    while stack:
        node = stack.pop()
        if node in seen or node in done:
            continue
        seen.add(node)
        if isinstance(node, Var) or _reads(node, memo) & local:
            if not isinstance(node, Var | GridRegionExpr):
                stack.extend(node.operands())
            continue
        order.append(node)
    return order


def loop_captures(loop: GridRegionExpr, done: Mapping[Expr, Any]) -> list[Expr]:
    """Outer values (already lowered: in `done`) that the loop body reads; the while threads
    them through as unchanged carries, so its regions capture nothing."""
    local = {loop.induction_var, *loop.carried_args}
    found: dict[Expr, None] = {}
    stack, seen = [loop.body, *loop.yield_values], set()
    while stack:
        node = stack.pop()
        if node in seen or node in local:
            continue
        seen.add(node)
        if node in done:
            found[node] = None
            continue
        if isinstance(node, GridRegionExpr):
            stack.extend(node.init_args)
            stack.extend(v for v in (node.body, *node.yield_values))
            continue
        stack.extend(node.operands())
    return list(found)


def loop_bounds(loop: GridRegionExpr, bindings: Mapping[Any, int] | None) -> tuple[int, int, int]:
    """(start, stop, step) of `loop` as ints (DimVars resolved through `bindings`)."""
    start, stop, step = (
        int(resolve_dim(d, bindings or {})) for d in (loop.start, loop.extent, loop.step)
    )
    return start, stop, step


def while_condition(lw: Lowering, induction: str, stop: int) -> list[str]:
    """The lines of a while's condition region: the induction (an i64 scalar) is below `stop`."""
    index_type = lw.type(TensorType((), i64))
    cond = lw.child(4)
    bound = cond.constant(stop, i64)
    pred = cond.op(
        f"stablehlo.compare LT, {induction}, {bound}, SIGNED : "
        f"({index_type}, {index_type}) -> tensor<i1>"
    )
    cond.line(f'"stablehlo.return"({pred}) : (tensor<i1>) -> ()')
    return cond.lines


def while_text(
    lw: Lowering,
    init_names: list[str],
    types: list[str],
    block_args: list[str],
    cond_lines: list[str],
    body_lines: list[str],
) -> Lowered:
    """`stablehlo.while` over (induction, carries...) with the two regions' lines
    (`while_condition`, and a body ending in its `stablehlo.return`)."""
    signature = ", ".join(f"{a}: {t}" for a, t in zip(block_args, types, strict=True))
    all_types = ", ".join(types)
    return lw.op(
        f'"stablehlo.while"({", ".join(init_names)}) ({{\n'
        + f"{' ' * (lw.indent + 2)}^bb0({signature}):\n"
        + "\n".join(cond_lines)
        + f"\n{' ' * lw.indent}}}, {{\n"
        + f"{' ' * (lw.indent + 2)}^bb0({signature}):\n"
        + "\n".join(body_lines)
        + f"\n{' ' * lw.indent}}}) : ({all_types}) -> ({all_types})",
        len(types),
    )
