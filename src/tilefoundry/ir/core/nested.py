"""Values of tuple type as the engines carry them: nested Python tuples of leaves (arrays, SSA
names, per-device shards), flattened where a boundary takes one flat list (a StableHLO
signature, a kernel's operands, a process's results) and regrouped as the type nests after."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tilefoundry.ir.types import TupleType


def flatten(value: Any) -> list[Any]:
    """The leaves of a nested tuple, depth first; anything but a tuple is one leaf."""
    if not isinstance(value, tuple):
        return [value]
    return [leaf for item in value for leaf in flatten(item)]


def regroup(leaves: Iterator[Any], like: Any) -> Any:
    """The next leaves of `leaves` nested as `like` nests: `like` is a TupleType (a field per
    item) or a nested tuple (an item per item); anything else takes one leaf. The inverse of
    `flatten` for one value; successive calls on one iterator regroup successive values."""
    if isinstance(like, TupleType):
        return tuple(regroup(leaves, field) for field in like.fields)
    if isinstance(like, tuple):
        return tuple(regroup(leaves, item) for item in like)
    return next(leaves)
