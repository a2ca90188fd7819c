"""The graph walks every engine shares, written against the nodes' own edges (`Expr.operands`).

HIR is SSA-as-DAG with identity sharing and no depth limit (a decoder is a chain thousands of
nodes long), so every walk here is iterative and visits each node once. The canonical order is
the depth-first post-order from the roots, operands left to right — the order the printer
numbers values in — which is what makes every pass's output stable across runs and hash seeds.

`edges` picks the graph: `OPERANDS` (every value a node needs, loop bodies included: the
default), `BLOCK_OPERANDS` (one block only: a loop's body is not entered) or any function of a
node; `right_to_left(edges)` takes each node's operands last first, the order in which the
evaluator's walk computes them. The walks are hot (a compile walks a decoder's body a dozen
times), so for the two standard edge sets the common node classes are answered inline rather
than through a call per node.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator
from operator import methodcaller
from typing import TypeVar

from tilefoundry.ir.core.expr import Call, Constant, Var

Node = TypeVar("Node")
Edges = Callable[[Node], Iterable[Node]]

OPERANDS: Edges = methodcaller("operands")
BLOCK_OPERANDS: Edges = methodcaller("block_operands")
_NOTHING: frozenset = frozenset()


def right_to_left(edges: Edges) -> Edges:
    """`edges` with each node's operands taken last first."""
    return lambda node: reversed(edges(node))


def post_order(
    roots: Iterable[Node], edges: Edges = OPERANDS, done: Container[Node] = _NOTHING
) -> list[Node]:
    """Every node under `roots` once, operands before users, in edge order; no recursion.

    This is the order of the recursive walk "visit each unvisited operand, then emit the node",
    run with a stack of operand iterators (a node is marked when first reached: in a DAG a
    marked node is either emitted or on the stack below its reacher, never re-entered; in a
    graph with cycles, such as a call graph, a cycle is entered once). Nodes in `done` (values a
    caller computed already) are neither entered nor emitted."""
    order: list[Node] = []
    seen: set[Node] = set()
    inline = edges is OPERANDS or edges is BLOCK_OPERANDS  # the common node classes inline
    for root in roots:
        if root in seen or root in done:
            continue
        seen.add(root)
        stack = [(root, iter(edges(root)))]
        while stack:
            node, pending = stack[-1]
            for child in pending:
                if child in seen or child in done:
                    continue
                seen.add(child)
                if inline:
                    kind = type(child)
                    if kind is Var or kind is Constant:
                        order.append(child)  # a leaf is emitted as soon as it is reached
                        continue
                    if kind is Call:
                        stack.append((child, iter(child.args)))
                        break
                stack.append((child, iter(edges(child))))
                break
            else:
                stack.pop()
                order.append(node)
    return order


def iter_nodes(*roots: Node, edges: Edges = OPERANDS) -> Iterator[Node]:
    """Every node under `roots` once, when the order does not matter or a node is wanted before
    its operands: a depth-first pre-order that takes the last root and the last operand first
    (the cheapest order to walk: one stack of nodes)."""
    seen: set[Node] = set()
    stack = list(roots)
    inline = edges is OPERANDS or edges is BLOCK_OPERANDS  # a Call's operands inline
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        if inline and type(node) is Call:
            stack.extend(node.args)
        else:
            stack.extend(edges(node))


def users(nodes: Iterable[Node], edges: Edges = OPERANDS) -> dict[Node, list[Node]]:
    """Each node's users among `nodes` (with multiplicity, in order)."""
    found: dict[Node, list[Node]] = {}
    for node in nodes:
        for operand in edges(node):
            found.setdefault(operand, []).append(node)
    return found
