"""Facts read off a program's IR, one definition each, computed once per Function.

Every engine asks the same few questions of a body: which Vars a value reads (is it invariant in
a loop? does the body read a Var nothing binds?), which meshes the program lives on, and how many
devices it needs. Nodes and Functions are immutable once built, so each answer is a fact of the
IR: the per-Function ones are kept on the Function itself (`Function.facts`: they go when it
goes), and `LoopReads` is the per-node fact for walks that cross bodies.

Only loop variables are tracked per node: a set of every reachable parameter at every node is
quadratic in the body's size, and a loop's own variables are all that decides invariance. A Var
that neither a parameter nor an enclosing loop binds is found from the walk's Vars instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import wraps
from math import prod
from typing import Any

from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.core.graph import iter_nodes, post_order
from tilefoundry.ir.hir.function import Function
from tilefoundry.ir.hir.fusion_region import FusionRegion
from tilefoundry.ir.hir.grid_region import GridRegionExpr
from tilefoundry.ir.lowering.mlir_text import mesh_is_on_one_device
from tilefoundry.ir.types import TensorType, TupleType, tensor_fields
from tilefoundry.ir.types.shard import Mesh, ShardLayout

_NONE: frozenset[Var] = frozenset()


def loop_locals(loop: GridRegionExpr) -> frozenset[Var]:
    """The Vars `loop` binds: its induction variable and its carries."""
    return frozenset((loop.induction_var, *loop.carried_args))


class LoopReads:
    """The loop variables each node reads and does not bind itself (a loop binds its own), for
    the nodes walked so far; a node not walked yet is walked when asked about."""

    def __init__(self, nodes: Iterable[Expr] = ()) -> None:
        self._reads: dict[Expr, frozenset[Var]] = {}
        self.loop_vars: set[Var] = set()
        """Every Var a loop among the walked nodes binds."""
        self.add(nodes)

    def of(self, node: Expr) -> frozenset[Var]:
        found = self._reads.get(node)
        if found is None:
            self.add(post_order((node,), done=self._reads))
            found = self._reads[node]
        return found

    def bound_by(self, loop: GridRegionExpr) -> frozenset[Var]:
        """The Vars `loop` binds, the loop walked first: a node of its body read before the loop
        was walked would not know them for loop variables."""
        self.of(loop)
        return loop_locals(loop)

    def add(self, nodes: Iterable[Expr]) -> None:
        """Take in `nodes`, a post-order (operands first) whose operands are walked already or
        among them. A loop's Vars are reached only through the loop, so every loop of the walk
        is read off first."""
        nodes = list(nodes)
        loop_vars, reads = self.loop_vars, self._reads
        for node in nodes:
            if isinstance(node, GridRegionExpr):
                loop_vars.update(loop_locals(node))
        for node in nodes:
            if node in reads:
                continue
            if isinstance(node, Var):
                reads[node] = frozenset((node,)) if node in loop_vars else _NONE
                continue
            inner = [found for c in node.operands() if (found := reads[c])]
            found = inner[0] if len(inner) == 1 else _NONE.union(*inner)
            if found and isinstance(node, GridRegionExpr):
                found -= loop_locals(node)
            reads[node] = found


def free_vars(
    roots: tuple[Expr, ...], bound: Iterable[Var] = (), nodes: list[Expr] | None = None
) -> frozenset[Var]:
    """The Vars `roots` read that neither `bound` (a function's parameters, a region's inputs)
    nor an enclosing loop binds. `nodes`, when given, is `post_order(roots)` (or a post-order
    holding it) already computed by the caller."""
    nodes = post_order(roots) if nodes is None else nodes
    bound = frozenset(bound)
    if not any(isinstance(n, GridRegionExpr) for n in nodes):  # the usual body: no loop
        return frozenset(n for n in nodes if isinstance(n, Var) and n not in bound)
    reads = LoopReads(nodes)
    escaped = _NONE.union(*(reads.of(r) for r in roots)) - bound
    unbound = {
        n for n in nodes if isinstance(n, Var) and n not in bound and n not in reads.loop_vars
    }
    return escaped | unbound


def loop_invariants(loop: GridRegionExpr, reads: LoopReads, done: Mapping[Expr, Any]) -> list[Expr]:
    """The values of `loop`'s body that read none of its variables and are not computed yet
    (`done`): the first such nodes walking down from the body and the yields through
    per-iteration nodes (a nested loop is per-iteration as a whole), in the order the exits
    compute them before the loop, so they run once, not once per iteration."""
    local = reads.bound_by(loop)

    def per_iteration(node: Expr) -> tuple[Expr, ...]:
        if isinstance(node, Var | GridRegionExpr) or node in done or not reads.of(node) & local:
            return ()
        return node.operands()

    return [
        node
        for node in iter_nodes(loop.body, *loop.yield_values, edges=per_iteration)
        if not (isinstance(node, Var) or node in done or reads.of(node) & local)
    ]


# ---- per Function -------------------------------------------------------------------------------


def _per_function(compute: Callable[[Function], Any]) -> Callable[[Function], Any]:
    """`compute(fn)` once per Function, kept in `fn.facts` under the fact's name."""
    name = compute.__name__

    @wraps(compute)
    def fact(fn: Function) -> Any:
        facts = fn.facts
        found = facts.get(name)
        if found is None:
            found = facts[name] = compute(fn)
        return found

    return fact


@_per_function
def body_order(fn: Function) -> list[Expr]:
    """`post_order((fn.body,))`: every node of the body, loop bodies included, operands first
    (one list, shared by every caller: read it, do not change it)."""
    return post_order((fn.body,))


@_per_function
def loop_reads(fn: Function) -> LoopReads:
    """The loop variables each node of `fn`'s body reads (see LoopReads)."""
    return LoopReads(body_order(fn))


@_per_function
def function_free_vars(fn: Function) -> frozenset[Var]:
    """The Vars `fn`'s body reads that neither a parameter nor an enclosing loop binds: none in
    a well-scoped function."""
    return free_vars((fn.body,), fn.params, body_order(fn))


def _program_edges(node: Expr) -> tuple[Expr, ...]:
    """A node's operands, then what else of the program it holds: a fusion region's body, a
    called function's body, a loop's carries."""
    edges = node.operands()
    if isinstance(node, Call):
        target = node.target
        if isinstance(target, FusionRegion):
            edges = (*edges, *target.outputs)
        elif isinstance(target, Function) and target.body is not None:
            edges = (*edges, target.body)
    elif isinstance(node, GridRegionExpr):
        edges = (*edges, *node.carried_args)
    return edges


@_per_function
def mesh_sites(fn: Function) -> dict[Mesh, Expr]:
    """Every mesh a value of the program is sharded over (its parameters, its body, loop bodies,
    fusion regions and called functions' bodies included), in first-seen order, each with where
    it is first seen: the first parameter typed on it, else the first node of the walk. Empty for
    an unsharded program."""
    roots = (*fn.params, fn.body) if fn.body is not None else fn.params
    sites = {}
    for node in iter_nodes(*roots, edges=_program_edges):
        for mesh in _meshes(node.type):
            sites.setdefault(mesh, node)
    for param in reversed(fn.params):
        for mesh in _meshes(param.type):
            sites[mesh] = param
    return sites


def _meshes(type_: Any) -> list[Mesh]:
    if not isinstance(type_, TensorType | TupleType):
        return []
    return [t.layout.mesh for t in tensor_fields(type_) if isinstance(t.layout, ShardLayout)]


def program_meshes(fn: Function) -> list[Mesh]:
    """The meshes of `mesh_sites`, in first-seen order."""
    return list(mesh_sites(fn))


def device_meshes(fn: Function) -> list[Mesh]:
    """The program's meshes that span devices (a cta mesh is the CTAs of one device)."""
    return [mesh for mesh in mesh_sites(fn) if not mesh_is_on_one_device(mesh)]


def device_count(fn: Function) -> int | None:
    """How many devices the program runs on: the size of its (first) device mesh; None when it
    has none, so it runs on one device."""
    meshes = device_meshes(fn)
    return int(prod(int(e) for e in meshes[0].shape)) if meshes else None
