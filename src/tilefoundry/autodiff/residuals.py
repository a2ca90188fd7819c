"""What a loop's backward reads from its forward: stacked per iteration, or recomputed.

The backward loop runs the iterations in reverse, and its VJP rules read forward values of the
iteration they differentiate (a matmul's operands, a softmax's result). Such a value is either
*stacked* — the forward loop writes it into row `m` of an `(n, ...)` buffer it carries
(`dynamic_update_slice`, as a scan does) and the backward reads row `n - 1 - j` back — or
*recomputed* in the backward iteration from what it reads. The choice, per value:

- a value that reads no carry (a window of a stacked weight `w[layer]`, index arithmetic) is
  recomputed: it costs at most a copy, and stacking it would copy the invariant once per iteration;
- a reshape, transpose or broadcast (a view no smaller than its operand) is recomputed from its
  operand, so a value and its views are stacked once;
- a tuple-valued value (a RoPE's pair, a nested loop) is recomputed, and its fields stacked;
- anything else that reads a carry is stacked: the backward then does no forward work twice.

Stacks live in gmem, each in its value's sharding with the iteration axis in front (a split
activation's stack is split the same way: each device stacks its own block, no communication).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tilefoundry.autodiff.builder import Builder
from tilefoundry.autodiff.reshard_policy import conformed, value_states
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.types import StorageKind, TensorType
from tilefoundry.ir.types.shard import Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.shard_layout import canonical_shard_layout
from tilefoundry.passes.graph import type_bytes
from tilefoundry.rules import FUSION, FusionKind


def stacked_values(
    roots: Sequence[Expr],
    replayed: Mapping[Expr, Expr],
    reads_carry: set[Expr],
    stop: Iterable[Expr],
) -> list[Expr]:
    """The replayed values the backward body under `roots` reads that are stacked (see the module
    doc), in walk order. `replayed` maps each replayed value to its forward original (a carry's
    placeholder to the carry), `reads_carry` holds the originals that read a carry."""
    kept = frozenset(stop)
    stacked: list[Expr] = []
    seen: set[Expr] = set()
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if node in seen or node in kept:
            continue
        seen.add(node)
        original = replayed.get(node)
        if original is not None and _stacked(node, original, reads_carry):
            stacked.append(node)
            continue
        stack.extend(reversed(node.operands()))
    return stacked


def _stacked(node: Expr, original: Expr, reads_carry: set[Expr]) -> bool:
    if isinstance(original, Var):  # a carry's own value at the iteration's start
        return _stackable(node.type)
    if original not in reads_carry or not _stackable(node.type):
        return False
    return not (isinstance(node, Call) and _is_widening_view(node))


def _stackable(type_: object) -> bool:
    """A complete tensor whose states a stack can take (a pending value is recomputed)."""
    if not isinstance(type_, TensorType) or type_.storage == StorageKind.UMAT:
        return False
    if not isinstance(type_.layout, ShardLayout):
        return True
    states = value_states(type_)
    return states is not None and not any(isinstance(s, Partial) for s in states)


def _is_widening_view(call: Call) -> bool:
    op = call.target
    if not FUSION.has(type(op)) or FUSION.lookup(type(op))(op) is not FusionKind.VIEW:
        return False
    own = type_bytes(call.type)
    return all(
        own is not None and (b := type_bytes(a.type)) is not None and own >= b for a in call.args
    )


def stack_type(type_: TensorType, count: int) -> TensorType:
    """The type of `count` values of `type_` stacked along a new leading axis, in gmem."""
    shape = (count, *type_.shape)
    if not isinstance(type_.layout, ShardLayout):
        return TensorType(shape, type_.dtype, None, StorageKind.GMEM)
    states = tuple(Split(s.axis + 1) if isinstance(s, Split) else s for s in value_states(type_))
    layout = canonical_shard_layout(shape, type_.layout.mesh, states)
    return TensorType(shape, type_.dtype, layout, StorageKind.GMEM)


def empty_stack(type_: TensorType, ad: Builder) -> Expr:
    """Zeros of a stack's type (split as the stack is: a local slice of a replicated zero)."""
    return ad.zeros_of(type_)


def write_row(stack: Expr, value: Expr, row: Expr, ad: Builder, **window) -> Expr:
    """`stack` with `value` written at row `scale * row + offset` (`window`)."""
    one = TensorType((1, *value.type.shape), value.type.dtype, None, StorageKind.GMEM)
    if isinstance(stack.type.layout, ShardLayout):
        one = stack_type(value.type, 1)
    update = conformed(ad.tf.reshape(value, tuple(one.shape)), one, ad)
    return ad.tf.dynamic_update_slice(stack, update, row, axis=0, **window)


def read_row(stack: Expr, row: Expr, like: TensorType, ad: Builder, **window) -> Expr:
    """Row `scale * row + offset` of `stack`, as a value of exactly the type `like`."""
    window_value = ad.tf.dynamic_slice(stack, row, axis=0, size=1, **window)
    return conformed(ad.tf.reshape(window_value, tuple(like.shape)), like, ad)
