"""The cotangent accumulator: every contribution a forward value receives, summed once.

A value used several times (fan-out) receives one contribution per use. They are summed in their
own types (two pending sums on the same mesh axes add as pending sums, with no collective), equal
types first, so that a collective the sum still needs runs once on the total rather than once per
contribution; only two contributions the add rule refuses are moved to a common state first
(`reshard_policy.added`). A tuple-valued forward value (a RoPE, a Tuple) holds one accumulator
per field, so a TupleGetItem contributes to its field only.
"""

from __future__ import annotations

from typing import Any

from tilefoundry.autodiff.builder import Builder
from tilefoundry.autodiff.reshard_policy import added
from tilefoundry.errors import InternalCompilerError
from tilefoundry.ir.core import Expr
from tilefoundry.ir.types import TensorType, TupleType

Cotangent = Any
"""An Expr for a tensor value, a tuple of Cotangent (or None: no contribution) for a tuple."""


class Accumulator:
    """node -> its contributions so far (a list per tensor leaf, nested for tuple types)."""

    def __init__(self) -> None:
        self._contributions: dict[Expr, Any] = {}

    def add(self, node: Expr, cotangent: Cotangent, source: str) -> None:
        """Record `cotangent` (from the rule named `source`) as a contribution to `node`."""
        if cotangent is None:
            return
        slot = self._contributions.get(node)
        if slot is None:
            slot = self._contributions[node] = _empty(node.type)
        _record(slot, node.type, cotangent, source)

    def has(self, node: Expr) -> bool:
        return node in self._contributions

    def total(self, node: Expr, ad: Builder) -> Cotangent:
        """The sum of `node`'s contributions (None where a leaf received none)."""
        slot = self._contributions.pop(node, None)
        if slot is None:
            return None
        return _sum(slot, node.type, ad)


def _empty(type_: Any) -> Any:
    if isinstance(type_, TupleType):
        return [_empty(field) for field in type_.fields]
    return []


def _record(slot: Any, type_: Any, cotangent: Cotangent, source: str) -> None:
    if isinstance(type_, TupleType):
        if not isinstance(cotangent, tuple) or len(cotangent) != len(type_.fields):
            raise InternalCompilerError(
                f"{source}: a VJP rule gave {cotangent!r} for a value of type {type_}"
            )
        for field_slot, field, part in zip(slot, type_.fields, cotangent, strict=True):
            if part is not None:
                _record(field_slot, field, part, source)
        return
    have = getattr(cotangent, "type", None)
    if not (
        isinstance(have, TensorType)
        and tuple(have.shape) == tuple(type_.shape)
        and have.dtype == type_.dtype
    ):
        raise InternalCompilerError(
            f"{source}: a VJP rule gave a cotangent of type {have} for a value of type {type_}; "
            "a cotangent has its primal's shape and dtype"
        )
    slot.append(cotangent)


def _sum(slot: Any, type_: Any, ad: Builder) -> Cotangent:
    if isinstance(type_, TupleType):
        parts = tuple(_sum(s, f, ad) for s, f in zip(slot, type_.fields, strict=True))
        return None if all(p is None for p in parts) else parts
    if not slot:
        return None
    groups: dict[Any, Expr] = {}
    for contribution in slot:
        key = contribution.type.layout
        groups[key] = ad.tf.add(groups[key], contribution) if key in groups else contribution
    totals = list(groups.values())
    total = totals[0]
    for other in totals[1:]:
        total = added(total, other, type_, ad)
    return total
