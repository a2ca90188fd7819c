"""Which values carry cotangents: those that depend on a differentiated value through floats.

The backward walk computes a cotangent only for such a value. A loop is the one node whose
dependence is not read off its operands: its body reads outer values directly (a stacked weight's
window `w[layer]`) and a carry depends on the differentiated values through every iteration, so a
loop's *frontier* (the outer values its iterations read) counts as its operands, and its
differentiated carries are a fixed point: a carry is differentiated when its initial value is, or
when its yield depends on a differentiated frontier value or on a differentiated carry.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tilefoundry.autodiff.builder import is_float_tensor
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.types import TupleType
from tilefoundry.rules import ZERO_COTANGENT


def differentiable(type_: object) -> bool:
    """Whether a value of `type_` carries a cotangent (a float tensor, or a tuple holding one)."""
    if isinstance(type_, TupleType):
        return any(differentiable(field) for field in type_.fields)
    return is_float_tensor(type_)


def region_order(roots: Sequence[Expr], leaves: Iterable[Expr]) -> list[Expr]:
    """The nodes under `roots` down to `leaves` (emitted, not entered), operands first: the
    region one backward walk covers (a loop body stops at its frontier, a recomputed call at its
    arguments)."""
    stop = frozenset(leaves)
    return post_order(tuple(roots), lambda n: () if n in stop else n.operands())


def varied_nodes(order: Sequence[Expr], leaves: Iterable[Expr]) -> set[Expr]:
    """The nodes of `order` whose value depends on one of the differentiated `leaves`."""
    varied = {leaf for leaf in leaves if differentiable(leaf.type)}
    for node in order:
        if node in varied or not differentiable(node.type):
            continue
        if isinstance(node, GridRegionExpr):
            if differentiated_carries(node, varied):
                varied.add(node)
        elif any(o in varied for o in node.block_operands()):
            if isinstance(node, Call) and ZERO_COTANGENT.has(type(node.target)):
                continue
            varied.add(node)
    return varied


def loop_locals(loop: GridRegionExpr) -> frozenset[Var]:
    return frozenset((loop.induction_var, *loop.carried_args))


def frontier(loop: GridRegionExpr) -> tuple[Expr, ...]:
    """The values `loop`'s iterations read that do not change between iterations (outer values,
    and body values that read no loop variable), in walk order: the first such values reached
    walking down from the yields through the per-iteration values (a nested loop's body is
    walked through, its own variables counting as per-iteration)."""
    order = post_order(tuple(loop.yield_values))
    bound = set(loop_locals(loop))
    reads = _loop_reads(order, bound)
    found: set[Expr] = set()
    seen: set[Expr] = set()
    stack = list(loop.yield_values)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if not (node in bound or reads[node] & bound):
            found.add(node)
        elif isinstance(node, GridRegionExpr):
            bound.update(loop_locals(node))
            stack.extend(node.operands())
        else:
            stack.extend(node.block_operands())
    return tuple(node for node in order if node in found)


def carry_readers(loop: GridRegionExpr, outer: Sequence[Expr]) -> set[Expr]:
    """The values of `loop`'s body (down to its frontier `outer`) that read a carry."""
    carries = set(loop.carried_args)
    reads = _loop_reads(region_order(loop.yield_values, outer), carries, frozenset(outer))
    return {node for node, found in reads.items() if found & carries}


def _loop_reads(
    order: Sequence[Expr], loop_vars: set[Var], outer: frozenset[Expr] = frozenset()
) -> dict[Expr, frozenset[Var]]:
    """The loop variables (`loop_vars`, and those of every loop in `order`) each node of
    `order` (a post-order) reads and does not bind itself; `outer` values read none."""
    loop_vars = loop_vars.union(*(loop_locals(n) for n in order if isinstance(n, GridRegionExpr)))
    reads: dict[Expr, frozenset[Var]] = {}
    for node in order:
        if node in outer or isinstance(node, Var):
            reads[node] = frozenset((node,)) if node in loop_vars else frozenset()
            continue
        found = frozenset().union(*(reads[o] for o in node.operands()))
        if isinstance(node, GridRegionExpr):
            found -= loop_locals(node)
        reads[node] = found
    return reads


def differentiated_carries(loop: GridRegionExpr, varied: set[Expr]) -> tuple[int, ...]:
    """The indices of `loop`'s carries that carry cotangents, given the `varied` outer values."""
    outer = [f for f in frontier(loop) if f in varied]
    carried = {
        k for k, init in enumerate(loop.init_args) if init in varied and is_float_tensor(init.type)
    }
    order = region_order(loop.yield_values, (*outer, *loop.carried_args))
    while True:
        inner = varied_nodes(order, (*outer, *(loop.carried_args[k] for k in carried)))
        grown = carried | {
            k
            for k, value in enumerate(loop.yield_values)
            if value in inner and is_float_tensor(value.type)
        }
        if grown == carried:
            return tuple(sorted(carried))
        carried = grown
