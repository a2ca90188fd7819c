"""Nested tuples as the engines carry tuple-typed values (ir/core/nested.py): `flatten` lists the
leaves depth first, and `regroup` is its inverse, nesting leaves as a value or a type nests."""

import random

import pytest

from tilefoundry.ir.core.nested import flatten, regroup
from tilefoundry.ir.types import TensorType, TupleType, f32

T = TensorType((2,), f32)


def _random_value(rng: random.Random, counter: list[int], depth: int = 0):
    if depth > 3 or rng.random() < 0.4:
        counter[0] += 1
        return f"%{counter[0]}"
    return tuple(_random_value(rng, counter, depth + 1) for _ in range(rng.randint(0, 3)))


def _type_of(value):
    return TupleType(tuple(_type_of(v) for v in value)) if isinstance(value, tuple) else T


def _recursive_leaves(value) -> list:
    """The definition: a tuple's leaves are its items' leaves in order; anything else is one."""
    if isinstance(value, tuple):
        out = []
        for item in value:
            out += _recursive_leaves(item)
        return out
    return [value]


def test_flatten_is_depth_first_and_regroup_inverts_it_by_value_or_by_type():
    rng = random.Random(3)
    for _ in range(300):
        value = _random_value(rng, [0])
        leaves = flatten(value)
        assert leaves == _recursive_leaves(value)
        assert regroup(iter(leaves), value) == value
        assert regroup(iter(leaves), _type_of(value)) == value


def test_successive_regroups_take_successive_leaves_from_one_iterator():
    leaves = iter(["%a", "%b", "%c", "%d"])
    assert regroup(leaves, TupleType((T, T))) == ("%a", "%b")
    assert regroup(leaves, T) == "%c"
    assert regroup(leaves, ("x",)) == ("%d",)
    with pytest.raises(StopIteration):
        regroup(leaves, T)
