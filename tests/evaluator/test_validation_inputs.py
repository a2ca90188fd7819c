"""The validator's input generators: a wrong rule must not pass by luck of the inputs.

DTensor's generators once split Partial(sum) by a positive ratio, under which `abs P(sum) ->
P(sum)` passes; these tests pin each property that makes a wrong rule show.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.errors import EvalError
from tilefoundry.evaluator.collectives import combine
from tilefoundry.evaluator.validation_inputs import (
    Domain,
    draw_truth,
    extremum_addends,
    is_uninformative,
    place,
    sign_flipped,
    sum_addends,
)
from tilefoundry.ir.types import f32, i32, make_shard_tensor_type
from tilefoundry.ir.types.shard import P, S, make_mesh


def _truth(seed=0, shape=(6, 8), dtype=np.float32):
    return draw_truth(shape, np.dtype(dtype), Domain("real"), np.random.default_rng(seed))


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("operand", [0, 1, 2])
def test_sum_addends_sum_to_the_truth(count, operand):
    value = _truth()
    parts = sum_addends(value, count, operand, np.random.default_rng(1))
    assert len(parts) == count and all(p.dtype == value.dtype for p in parts)
    np.testing.assert_allclose(np.sum(parts, axis=0, dtype=np.float64), value, rtol=1e-5, atol=1e-5)


def test_integer_sum_addends_are_exact():
    value = _truth(dtype=np.int32)
    parts = sum_addends(value, 4, 0, np.random.default_rng(1))
    np.testing.assert_array_equal(np.sum(parts, axis=0, dtype=np.int32), value)


def test_sum_addends_are_mixed_sign_where_the_truth_is_not():
    """abs/relu of an addend differs from the addend of abs/relu only with mixed signs."""
    value = _truth()
    parts = np.stack(sum_addends(value, 4, 0, np.random.default_rng(1)))
    mixed = (parts > 0).any(axis=0) & (parts < 0).any(axis=0)
    assert mixed.mean() > 0.9
    assert not np.allclose(np.abs(parts).sum(axis=0), np.abs(value), rtol=1e-3)


def test_sum_addends_are_uneven_and_distinct_per_operand():
    """P(sum) * P(sum) must not pass by symmetry: the split differs between operands."""
    value = np.ones((64,), np.float32) * 3
    first = np.stack(sum_addends(value, 4, 0, np.random.default_rng(7)))
    second = np.stack(sum_addends(value, 4, 1, np.random.default_rng(7)))
    assert not np.allclose(first, second)
    assert not np.allclose(first.mean(axis=1), first.mean())
    assert abs(first[0].mean() - second[0].mean()) > 0.05


@pytest.mark.parametrize("reduction", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_extremum_addends_reduce_to_the_truth(reduction, dtype):
    value = _truth(dtype=dtype)
    parts = extremum_addends(value, 4, reduction, 0, np.random.default_rng(3))
    np.testing.assert_array_equal(combine(parts, reduction), value)


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_no_device_holds_the_extremum_everywhere(reduction):
    value = _truth()
    parts = extremum_addends(value, 4, reduction, 0, np.random.default_rng(3))
    assert not any(np.array_equal(p, value) for p in parts)
    owners = [np.equal(p, value) for p in parts]
    assert all(o.any() for o in owners)
    shifted = extremum_addends(value, 4, reduction, 1, np.random.default_rng(3))
    assert not np.array_equal(np.equal(shifted[0], value), owners[0])


def test_extremum_addends_hold_values_of_both_signs_for_a_positive_truth():
    """A monotone op defined for positives only (log) meets the negative addends it must."""
    value = draw_truth((8, 8), np.dtype(np.float32), Domain("positive"), np.random.default_rng(0))
    parts = np.stack(extremum_addends(value, 4, "max", 0, np.random.default_rng(3)))
    assert (parts < 0).any() and (value > 0).all()


def test_sign_flip_negates_symmetric_domains_only():
    value = _truth()
    np.testing.assert_array_equal(sign_flipped(value, Domain("real")), -value)
    positive = np.abs(value) + 1
    assert sign_flipped(positive, Domain("positive")) is positive
    index = np.arange(4)
    assert sign_flipped(index, Domain("index", 4)) is index


def test_all_zero_truths_are_redrawn():
    class ZeroFirst:
        """A generator whose first draws are all zero, then real values."""

        def __init__(self):
            self.calls = 0
            self.inner = np.random.default_rng(0)

        def standard_normal(self, shape):
            self.calls += 1
            return np.zeros(shape) if self.calls < 3 else self.inner.standard_normal(shape)

    rng = ZeroFirst()
    value = draw_truth((4,), np.dtype(np.float32), Domain("real"), rng)
    assert rng.calls == 3 and not is_uninformative(value)


def test_a_generator_that_only_draws_zeros_is_refused():
    class Zeros:
        def standard_normal(self, shape):
            return np.zeros(shape)

    with pytest.raises(EvalError, match="all zero"):
        draw_truth((4,), np.dtype(np.float32), Domain("real"), Zeros())


def test_place_splits_blocks_and_partials_consistently():
    """Completing the placed shards (gather's order: mesh axis 0 first) gives the value back,
    for a Split on one mesh axis and mixed Partials on two."""
    mesh = make_mesh((2, 2), ("a", "b"))
    value = _truth(shape=(4, 8))
    split = make_shard_tensor_type((4, 8), f32, mesh=mesh, attrs=(S(1), P("max")))
    shards = place(value, split, 0, np.random.default_rng(0))
    for a in range(2):
        block = combine([shards[(a, 0)], shards[(a, 1)]], "max")
        np.testing.assert_array_equal(block, value[:, 4 * a : 4 * a + 4])
    mixed = make_shard_tensor_type((4, 8), f32, mesh=mesh, attrs=(P("sum"), P("min")))
    shards = place(value, mixed, 0, np.random.default_rng(0))
    per_b = [combine([shards[(0, b)], shards[(1, b)]], "sum") for b in range(2)]
    np.testing.assert_allclose(combine(per_b, "min"), value, rtol=1e-5, atol=1e-5)


def test_integer_partials_place_exactly():
    mesh = make_mesh((4,), ("x",))
    value = _truth(dtype=np.int32)
    type_ = make_shard_tensor_type(value.shape, i32, mesh=mesh, attrs=(P("sum"),))
    shards = place(value, type_, 0, np.random.default_rng(0))
    np.testing.assert_array_equal(combine(list(shards.values()), "sum"), value)
