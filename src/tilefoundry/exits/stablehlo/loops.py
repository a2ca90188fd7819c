"""The `stablehlo.while` both emitters write for a GridRegionExpr: what the loop threads through
(captures; what it hoists is `ir.hir.facts.loop_invariants`), its bounds, and its condition and
text.

The one-device emitter and the SPMD emitter lower the body each in its own medium (names, or
per-device shards); the loop around it is the same, so it is written once, here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilefoundry.ir.core import Expr
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.hir.facts import loop_locals
from tilefoundry.ir.lowering.builder import Lowered, Lowering
from tilefoundry.ir.types import TensorType, i64, resolve_dim


def loop_captures(loop: GridRegionExpr, done: Mapping[Expr, Any]) -> list[Expr]:
    """Outer values (already lowered: in `done`) that the loop body reads; the while threads
    them through as unchanged carries, so its regions capture nothing."""
    local = loop_locals(loop)

    def inside(node: Expr) -> tuple[Expr, ...]:
        return () if node in done or node in local else node.operands()

    return [
        node
        for node in iter_nodes(loop.body, *loop.yield_values, edges=inside)
        if node in done and node not in local
    ]


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
