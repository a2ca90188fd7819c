"""fuse: the producer->consumer fusion pass (SFEP-0053 §3.5 as DESIGN §6 words it).

Planning walks each function's top-level block in reverse block order, so every consumer is
visited before its producers. An op that no region holds yet seeds a region, which then grows
toward its producers: each member's operands are offered, left to right, to `is_fusible_edge`
(legality) and then `should_fuse` (profitability), repeating until nothing joins (a producer
refused because one of its users was not yet a member is offered again once it is); each edge
is decided once, so planning is linear in the size of a region (`_RegionGrowth`). A region
of one op saves nothing and is not formed. A loop body is a block of its own (DESIGN §6: the
body's boundary is a barrier): its per-iteration ops fuse among themselves by the same rules,
never with ops outside the loop, and a carry's yield is used by the loop so it stays a region
result.

The rewrite replaces each region's output by a Call of a FusionRegion whose body re-creates the
member ops (same targets, same types, same source spans) over fresh input Vars, in block order.
Nothing is reordered, re-associated, re-typed or duplicated, so the fused program computes exactly
what the unfused one does.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import BindingName, Call, Constant, Expr, Var
from tilefoundry.ir.core.graph import iter_nodes, post_order, users
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.facts import LoopReads, loop_locals
from tilefoundry.ir.text.printer import op_mnemonic
from tilefoundry.passes.fusion_rules import (
    ROOT_KINDS,
    fusion_kind,
    is_fusible_edge,
    is_inlined_literal,
    region_kind,
    should_fuse,
)
from tilefoundry.passes.graph import Rebuilder, copy_call, type_bytes
from tilefoundry.rules import FusionKind


@dataclass(frozen=True)
class RegionReport:
    """One formed region: where, its kind, its ops in block order, the bytes it stops writing."""

    function: str
    kind: str
    ops: tuple[str, ...]
    saved_bytes: int


@dataclass(frozen=True)
class FusionReport:
    regions: tuple[RegionReport, ...]

    @property
    def saved_bytes(self) -> int:
        """Bytes of intermediates no longer materialised, over every region."""
        return sum(r.saved_bytes for r in self.regions)

    def __str__(self) -> str:
        lines = [f"{len(self.regions)} fusion region(s), {self.saved_bytes} bytes not materialised"]
        for r in self.regions:
            lines.append(
                f"  @{r.function} {r.kind}: {len(r.ops)} ops ({', '.join(r.ops)}), "
                f"{r.saved_bytes} bytes saved"
            )
        return "\n".join(lines)


def plan_regions(body: Expr) -> list[list[Call]]:
    """The regions of every block under `body` (its own, then each loop body's), each as its
    members in block order; deterministic."""
    nodes = post_order((body,))
    use = users(nodes)
    regions: list[list[Call]] = []
    for block, returned in _blocks(body, nodes):
        regions += _plan_block(block, use, returned)
    return regions


def _blocks(body: Expr, nodes: list[Expr]) -> list[tuple[list[Expr], Expr]]:
    """(nodes in block order, the value the block hands out) for the function body and for each
    loop body; `nodes` is `post_order((body,))`. A loop body's block is what it computes per
    iteration: the nodes that read the loop's induction variable or carries. A loop-invariant
    node the body reads is computed once, before the loop, so it belongs to the enclosing block
    (as the exits hoist it). Without loops the one block is `nodes` itself."""
    if not any(isinstance(n, GridRegionExpr) for n in nodes):
        return [(nodes, body)]
    reads = LoopReads(nodes)

    def operands(node: Expr) -> tuple[Expr, ...]:
        if not isinstance(node, GridRegionExpr):
            return node.block_operands()
        return (*node.init_args, *_invariant_frontier(node, reads))

    blocks = [(post_order((body,), operands), body)]
    for node in nodes:
        if isinstance(node, GridRegionExpr):
            local = loop_locals(node)
            roots = (node.body, *node.yield_values)
            block = [n for n in post_order(roots, operands) if reads.of(n) & local]
            blocks.append((block, node.body))
    return blocks


def _invariant_frontier(loop: GridRegionExpr, reads: LoopReads) -> list[Expr]:
    """The loop-invariant values its body reads: the first nodes, walking down from the body
    through per-iteration nodes, that read none of the loop's variables (a nested loop's own
    inits and invariant frontier are its operands here)."""
    local = loop_locals(loop)

    def per_iteration(node: Expr) -> tuple[Expr, ...]:
        if isinstance(node, Var) or not reads.of(node) & local:
            return ()
        if isinstance(node, GridRegionExpr):
            return (*node.init_args, *_invariant_frontier(node, reads))
        return node.block_operands()

    return [
        node
        for node in iter_nodes(loop.body, *loop.yield_values, edges=per_iteration)
        if not (isinstance(node, Var) or reads.of(node) & local)
    ]


def _plan_block(block: list[Expr], use, returned: Expr) -> list[list[Call]]:
    position = {node: index for index, node in enumerate(block)}
    block_set = position.keys()
    taken: set[Expr] = set()
    regions: list[list[Call]] = []
    for seed in reversed(block):
        if seed in taken or fusion_kind(seed) == FusionKind.BARRIER:
            continue
        member_set = _RegionGrowth(seed, use, block_set, returned, taken).grow()
        if len(member_set) > 1:
            taken |= member_set
            # members in block order, without scanning the block once per region (quadratic)
            regions.append(sorted(member_set, key=position.__getitem__))
    return regions


class _RegionGrowth:
    """One region grown from its seed, deciding each producer->member edge once.

    The rule (module docstring) offers every member's operands, left to right, in rounds over
    the members until a round adds nothing; run literally it re-offers every edge of a region in
    every round, which is quadratic in a chain. Only one refusal can turn into an acceptance
    later: "a user of the producer is not a member yet", and that flips once, when the last user
    joins. Every other refusal is final (a root, once present, stays; a producer's readers in
    the region only grow, so a transpose that is not view-like never becomes so; the cost guard
    reads only the producer and its users). So an edge is offered once, at the first place in
    the rounds' order where all its producer's users are members, and a heap of (round, member
    index, operand index) replays that order: the same edges are accepted in the same order, so
    the region is exactly the one the rounds form.
    """

    def __init__(self, seed: Expr, use, block, returned: Expr, taken: set[Expr]) -> None:
        self.use, self.block, self.returned, self.taken = use, block, returned, taken
        self.members: list[Expr] = []
        self.index: dict[Expr, int] = {}
        self.has_root = False
        self.waiting: dict[Expr, int] = {}  # producer -> how many of its users are not members
        self.queue: list[tuple[int, int, int]] = []
        self.round, self.round_size = -1, 0  # the round being replayed, how many members it visits
        self._join(seed, (-1, 0, 0))

    def grow(self) -> set[Expr]:
        while self.queue:
            key = heapq.heappop(self.queue)
            round_, index, slot = key
            if round_ != self.round:
                self.round, self.round_size = round_, len(self.members)
            member = self.members[index]
            producer = member.args[slot]
            if producer in self.index:
                continue
            if is_fusible_edge(
                producer, member, self.index, self.use, self.block, self.returned, self.has_root
            ) and should_fuse(producer, self.index, self.use):
                self._join(producer, key)
        return set(self.index)

    def _join(self, member: Expr, key: tuple[int, int, int]) -> None:
        """Add `member` (accepted at `key`) and offer the edges whose last waited-for user it is."""
        self.index[member] = len(self.members)
        self.members.append(member)
        self.has_root = self.has_root or fusion_kind(member) in ROOT_KINDS
        for producer in dict.fromkeys(member.args):
            if producer in self.taken:
                continue
            left = self.waiting.get(producer)
            if left is None:
                left = len(set(self.use.get(producer, ())))
            self.waiting[producer] = left - 1
            if left == 1:
                self._offer(producer, key)

    def _offer(self, producer: Expr, key: tuple[int, int, int]) -> None:
        """Queue every member->`producer` edge where the rounds would next reach it after `key`:
        later in the current round if its member is visited there and comes after `key`, in the
        next round otherwise (a member that joined this round is first visited in the next)."""
        round_, at_index, at_slot = key
        for user in dict.fromkeys(self.use[producer]):
            index = self.index[user]
            this_round = round_ == self.round and index < self.round_size
            for slot, operand in enumerate(user.args):
                if operand is producer:
                    later = this_round and (index, slot) > (at_index, at_slot)
                    heapq.heappush(self.queue, (round_ if later else round_ + 1, index, slot))


class _Fuser(Rebuilder):
    def __init__(self) -> None:
        super().__init__(self._on_call)
        self.plans: dict[Expr, list[Call]] = {}
        self.function_name = ""
        self.reports: list[RegionReport] = []

    def _rebuild_function(self, fn: Function) -> Function:
        outer = self.function_name
        self.function_name = fn.name
        try:
            return super()._rebuild_function(fn)
        finally:
            self.function_name = outer

    def expr(self, root: Expr) -> Expr:
        for members in reversed(plan_regions(root)):
            self.plans[members[-1]] = members
        return super().expr(root)

    def _on_call(self, call: Call, args: tuple[Expr, ...], ctx: TypeInferContext) -> Expr:
        members = self.plans.get(call)
        if members is None:
            return copy_call(call, args, ctx)
        return self._region_call(members, ctx)

    def _region_call(self, members: list[Call], ctx: TypeInferContext) -> Expr:
        """The Call of a region computing `members[-1]` (the only member used outside)."""
        member_set = set(members)
        inner: dict[Expr, Expr] = {}
        inputs: list[Var] = []
        outer_args: list[Expr] = []
        body: list[Expr] = []
        for member in members:
            for operand in member.args:
                if operand in inner or operand in member_set:
                    continue
                if is_inlined_literal(operand):
                    inner[operand] = Constant(operand.value, operand.type, operand.metadata)
                    continue
                var = Var(f"in{len(inputs)}", operand.type)
                inputs.append(var)
                outer_args.append(self.memo[operand])
                inner[operand] = var
            metadata = member.metadata
            if member is members[-1]:  # the region Call carries the author's name, not the copy
                metadata = tuple(m for m in metadata if not isinstance(m, BindingName))
            # Every operand of the copy has its original's type (an input Var is typed as the
            # value it stands for), so the copy keeps the member's type; verify re-derives it.
            copy = Call(
                member.target,
                tuple(inner[a] for a in member.args),
                member.type,
                metadata=metadata,
            )
            inner[member] = copy
            body.append(copy)
        region = FusionRegion(tuple(inputs), tuple(body), (body[-1],), region_kind(members))
        result = Call(region, tuple(outer_args), members[-1].type, metadata=members[-1].metadata)
        ctx.assume(result, result.type)
        saved = sum(type_bytes(m.type) or 0 for m in members[:-1])
        self.reports.append(
            RegionReport(
                self.function_name,
                region.kind,
                tuple(op_mnemonic(m.target) for m in members),
                saved,
            )
        )
        return result


def fuse_with_report(obj: Any) -> tuple[Any, FusionReport]:
    """The fused Function or Module, and what fusion did."""
    fuser = _Fuser()
    fused = fuser.module_or_function(obj)
    return fused, FusionReport(tuple(fuser.reports))


def fuse(obj: Any) -> Any:
    """The Function or Module with its fusible producer->consumer chains grouped into regions."""
    return fuse_with_report(obj)[0]
