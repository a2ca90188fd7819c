"""Fusion legality and profitability (SFEP-0053 §3.5, DESIGN §6) as two separate functions.

Legality is semantics: `is_fusible_edge` decides whether a producer may be computed inside its
consumer's region without changing what the program means or how much work it does. Profitability
is policy: `should_fuse` is a deterministic cost guard consulted only for legal edges, so tuning
it can never make an illegal region legal.

The operation legality rule, by the producer's and consumer's `FusionKind`:

- ELEMENTWISE producers fuse into any non-barrier consumer (an elementwise chain, a view, or the
  region's single reduction/contraction root).
- REDUCTION and CONTRACTION ops are roots and two roots never share a region. A root may be the
  producer of its own region's epilogue: elementwise and view consumers of its result (softmax's
  normalisation, a residual add after a matmul) join the root's region when the region holds no
  other root, so the root's result is consumed where it is computed instead of being written out.
  Nothing a root computes is reordered: the epilogue reads the finished result.
- VIEW ops join only when view-like, i.e. expressible as an index map of the consumer's loop with no
  intervening copy. BroadcastTo (constant axes), Reshape (row-major linearisation), Slice
  (offset/stride map) and DynamicSlice (an offset map whose offset is a loop's scalar) always
  are, provided neither side carries an explicit physical Layout (a
  declared layout is a storage contract that a view would silently reinterpret). Transpose is
  view-like when every consumer of it inside the region is ELEMENTWISE, a VIEW or a CONTRACTION:
  the permutation then folds into the consumer's index map (a contraction reads its operands
  through dimension numbers, so a transposed operand is its operand prologue, as XLA's dot
  fusion does). A transpose feeding a reduction changes the order the reduction walks its
  input, i.e. it is a layout conversion for the reduction tree, and stays a barrier.
- BARRIER ops (copies, Reshard, data-dependent or multi-output ops, shape queries), calls of
  Functions or regions, loops and effect-form calls never fuse.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from tilefoundry.ir.core import Call, Constant, Expr, Op, Var
from tilefoundry.ir.types import StorageKind, TensorType, UnitType
from tilefoundry.ir.types.shard import ShardLayout
from tilefoundry.passes.graph import type_bytes
from tilefoundry.rules import FUSION, FusionKind

ROOT_KINDS = frozenset({FusionKind.REDUCTION, FusionKind.CONTRACTION})
ALWAYS_VIEW_LIKE = frozenset({"BroadcastTo", "DynamicSlice", "Reshape", "Slice"})
TRANSPOSE_READERS = frozenset({FusionKind.ELEMENTWISE, FusionKind.VIEW, FusionKind.CONTRACTION})
EPILOGUE_KINDS = frozenset({FusionKind.ELEMENTWISE, FusionKind.VIEW})


_KIND_RULES: dict[type, Callable[[Op], FusionKind]] = {}
"""Op class -> its FUSION rule, found once (the passes ask for a node's kind many times)."""


def fusion_kind(node: Expr) -> FusionKind:
    """The node's fusion role; anything that is not a pure op Call is a BARRIER."""
    if not isinstance(node, Call):
        return FusionKind.BARRIER
    target = node.target
    rule = _KIND_RULES.get(type(target))
    if rule is None:
        if not isinstance(target, Op) or not FUSION.has(type(target)):
            return FusionKind.BARRIER
        rule = _KIND_RULES[type(target)] = FUSION.lookup(type(target))
    if isinstance(node.type, UnitType):
        return FusionKind.BARRIER
    return rule(target)


def is_inlined_literal(node: Expr) -> bool:
    """A rank-0 unmaterialised literal needs no storage, so a region carries its own copy."""
    return (
        isinstance(node, Constant)
        and isinstance(node.type, TensorType)
        and node.type.rank == 0
        and node.type.storage == StorageKind.UMAT
    )


def _explicit_plain_layout(type_: object) -> bool:
    return (
        isinstance(type_, TensorType)
        and type_.layout is not None
        and not isinstance(type_.layout, ShardLayout)
    )


def view_like(
    view: Call,
    consumers: Sequence[Expr],
    readers: Mapping[Expr, Sequence[Expr]] | None = None,
    region: Collection[Expr] | None = None,
) -> bool:
    """Whether `view` (a VIEW op) is an index map for `consumers` (its users inside the region).

    `readers` maps each region member to its users (`region`, when given, filters them to the
    region's members), so a transpose read through further views is judged by the op at the end
    of the view chain: transpose -> reshape -> reduce is still a transpose feeding a reduction."""
    if any(_explicit_plain_layout(t) for t in (view.type, *(a.type for a in view.args))):
        return False
    name = type(view.target).__name__
    if name in ALWAYS_VIEW_LIKE:
        return True
    if name == "Transpose":
        return _read_by_index_maps(consumers, readers or {}, region)
    return False


def _read_by_index_maps(
    consumers: Sequence[Expr],
    readers: Mapping[Expr, Sequence[Expr]],
    region: Collection[Expr] | None,
) -> bool:
    """Every reader of a transpose, following views through to the ops they feed, is one that
    reads through an index map (TRANSPOSE_READERS)."""
    stack, seen = list(consumers), set()
    while stack:
        reader = stack.pop()
        if reader in seen:
            continue
        seen.add(reader)
        kind = fusion_kind(reader)
        if kind not in TRANSPOSE_READERS:
            return False
        if kind == FusionKind.VIEW:
            stack.extend(u for u in readers.get(reader, ()) if region is None or u in region)
    return True


def is_fusible_edge(
    producer: Expr,
    consumer: Expr,
    region: Collection[Expr],
    users: Mapping[Expr, Sequence[Expr]],
    block: Collection[Expr],
    returned: Expr,
    region_has_root: bool = False,
) -> bool:
    """Legality of computing `producer` inside the region that holds `consumer`.

    `region` is the region's current members (it includes `consumer`), `users` every node's users
    in the function (loop bodies included), `block` the nodes of the consumer's block and
    `returned` the function's result, `region_has_root` whether a member is already a root (a
    root producer joins only a rootless region, as its epilogue's producer). Rules, in SFEP §3.5
    order: (1) both are pure tensor ops in the same block; (2) the operation legality rule of the
    module docstring holds; (3) every user of the producer is in the region (no duplication); (4)
    the producer is not a parameter, a constant
    needing storage, the function's result (a region result) or an explicit copy (a BARRIER op).
    """
    if consumer not in region or producer in region:
        return False
    if producer not in block or consumer not in block:
        return False
    producer_kind, consumer_kind = fusion_kind(producer), fusion_kind(consumer)
    if FusionKind.BARRIER in (producer_kind, consumer_kind):
        return False
    if producer_kind in ROOT_KINDS and (region_has_root or consumer_kind not in EPILOGUE_KINDS):
        return False
    if producer is returned:
        return False
    producer_users = users.get(producer, ())
    if not producer_users or any(u not in region for u in producer_users):
        return False
    if producer_kind == FusionKind.VIEW:
        return view_like(producer, producer_users, users, region)
    return True


def should_fuse(
    producer: Call,
    region: Collection[Expr],
    users: Mapping[Expr, Sequence[Expr]],
) -> bool:
    """Profitability: fuse unless the cost guard predicts more live storage than unfused.

    Fusing removes the producer's result from memory but keeps the producer's operands alive until
    the region runs. An operand that is read only by the producer (not a parameter, not shared)
    would otherwise die at the producer, so it may enter the region only when it is no larger
    than the intermediate it replaces (this refuses, e.g., a small slice of a large temporary).
    The exception is a root joining as its epilogue's producer: an elementwise operand read only
    by the root is the root's prologue, offered to the region right after the root, so it is
    predicted fused rather than kept.
    Legality already forbids duplication, so the guard never has to weigh recomputation.
    """
    saved = type_bytes(producer.type)
    for operand in producer.args:
        if isinstance(operand, Var | Constant) or operand in region:
            continue
        if any(u is not producer for u in users.get(operand, ())):
            continue
        if fusion_kind(producer) in ROOT_KINDS and fusion_kind(operand) == FusionKind.ELEMENTWISE:
            continue  # the root's prologue: offered next, it is not kept but fused
        kept = type_bytes(operand.type)
        if saved is None or kept is None or kept > saved:
            return False
    return True


def region_kind(members: Sequence[Expr]) -> str:
    """`loop`, or the kind of the region's single root."""
    for node in members:
        kind = fusion_kind(node)
        if kind in ROOT_KINDS:
            return kind.value
    return "loop"
