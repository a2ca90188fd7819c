"""Clamp: min(max(x, lo), hi) with torch broadcasting (StableHLO clamp, numpy clip), its typing
and Partial rules (each proven or refuted by a two-device computation here), and the kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Constant, Var
from tilefoundry.ir.hir.math import Clamp
from tilefoundry.ir.types import (
    bf16,
    bool_,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 2), ("x", "y"))
C = Clamp()


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


LITERAL = make_tensor_type((), f32, "umat")

# (id, x, lo, hi, expected type | error regex)
CASES = [
    ("same shapes", plain((4, 8)), plain((4, 8)), plain((4, 8)), plain((4, 8))),
    ("broadcast bounds", plain((4, 8)), plain((8,)), plain((1, 8)), plain((4, 8))),
    ("bounds set the shape", plain(()), plain((3,)), plain(()), plain((3,))),
    ("float literals adopt", plain((4,), bf16), LITERAL, LITERAL, plain((4,), bf16)),
    ("ints", plain((4,), i32), plain((), i32), plain((4,), i32), plain((4,), i32)),
    ("int meets a float literal", plain((4,), i32), LITERAL, plain((), i32),
     r"'lo' is a float literal but the tensors are i32"),
    ("dtypes differ", plain((4,), i32), plain((), i64), plain((), i32),
     r"operand 'lo' is i64 but 'x' is i32"),
    ("bool", plain((4,), bool_), plain((), bool_), plain((), bool_), r"no order to clamp by"),
    ("shapes clash", plain((4,)), plain((3,)), plain(()), r"operand shapes do not broadcast"),
    # Splits follow the elementwise relation
    ("Split", sharded((8, 4), X, S(0)), plain((4,)), plain(()), sharded((8, 4), X, S(0))),
    # one pending max/min carries (clamp is non-decreasing in each operand); a sum never does
    ("x max", sharded((4,), X, P("max")), plain(()), plain(()), sharded((4,), X, P("max"))),
    ("hi min", plain((4,)), plain(()), sharded((4,), X, P("min")), sharded((4,), X, P("min"))),
    ("x sum", sharded((4,), X, P("sum")), plain(()), plain(()),
     r"'x' carries Partial\(sum\) on mesh axis 0 \('x'\).*not linear"),
    # two pending operands on one mesh axis: only where the inner max or outer min is theirs
    ("x, lo max", sharded((4,), X, P("max")), sharded((4,), X, P("max")), plain(()),
     sharded((4,), X, P("max"))),
    ("x, hi min", sharded((4,), X, P("min")), plain(()), sharded((4,), X, P("min")),
     sharded((4,), X, P("min"))),
    ("lo, hi min", plain((4,)), sharded((4,), X, P("min")), sharded((4,), X, P("min")),
     sharded((4,), X, P("min"))),
    ("x, hi max", sharded((4,), X, P("max")), plain(()), sharded((4,), X, P("max")),
     r"operands 'x' \(Partial\(max\)\) and 'hi' \(Partial\(max\)\) both pend"),
    ("x max, lo min", sharded((4,), X, P("max")), sharded((4,), X, P("min")), plain(()),
     r"operands 'x' \(Partial\(max\)\) and 'lo' \(Partial\(min\)\)"),
    ("different mesh axes", sharded((4,), XY, P("max"), S(0)), sharded((4,), XY, S(0), P("min")),
     plain(()), r"Partial|Split"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("x", "lo", "hi", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(x, lo, hi, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(C, x, lo, hi)
    else:
        assert typeinfer_call(C, x, lo, hi) == expected


def _clamp(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


def test_the_refused_pair_has_a_two_device_counterexample():
    """x and hi pending max: max over devices of the clamps is not the clamp of the maxes."""
    x, hi, lo = np.array([5.0, 0.0]), np.array([0.0, 5.0]), -np.inf
    assert _clamp(x.max(), lo, hi.max()) == 5.0
    assert max(_clamp(x[d], lo, hi[d]) for d in range(2)) == 0.0


def test_the_accepted_pairs_hold_on_random_addends():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 4, 64))  # 4 devices' values of x, lo, hi
    x0, lo0, hi0 = rng.standard_normal((3, 64))
    per_device = _clamp(a, b, hi0).max(axis=0)
    np.testing.assert_array_equal(per_device, _clamp(a.max(0), b.max(0), hi0))
    np.testing.assert_array_equal(_clamp(a, lo0, c).min(0), _clamp(a.min(0), lo0, c.min(0)))
    np.testing.assert_array_equal(_clamp(x0, b, c).min(0), _clamp(x0, b.min(0), c.min(0)))


def test_kernel_is_numpys_clip_including_lo_above_hi_and_nan():
    x = np.array([-3.0, 0.5, 9.0, np.nan, 2.0], np.float32)
    lo = np.array([0.0, 0.0, 0.0, 0.0, 7.0], np.float32)
    hi = np.array(6.0, np.float32)
    got = EVAL.lookup(Clamp)(C, (x, lo, hi), plain((5,)))
    np.testing.assert_array_equal(got, np.clip(x, lo, hi))
    assert got[-1] == 6.0  # lo > hi gives hi


def test_kernel_orders_negative_zero_below_positive_zero():
    """StableHLO clamp is minimum(maximum(x, lo), hi), whose maximum/minimum order -0.0 below
    +0.0 (numpy's return whichever operand they compared last): clamp(+0, -0, 1) is +0 and
    clamp(-0, -1, +0) is -0."""
    x = np.array([0.0, -0.0, -0.0, 0.0], np.float32)
    lo = np.array([-0.0, 0.0, -1.0, -1.0], np.float32)
    hi = np.array([1.0, 1.0, 0.0, -0.0], np.float32)
    got = EVAL.lookup(Clamp)(C, (x, lo, hi), plain((4,)))
    np.testing.assert_array_equal(np.signbit(got), [False, False, True, True])


def test_tf_clamp_takes_python_floats_in_the_tensors_dtype():
    x = Var("x", make_tensor_type((4,), bf16))
    call = tf.clamp(x, 0.0, 6.0)
    assert call.type == make_tensor_type((4,), bf16)
    assert all(isinstance(arg, Constant) for arg in call.args[1:])
