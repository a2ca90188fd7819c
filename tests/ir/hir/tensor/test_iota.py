"""Iota: StableHLO's (broadcasted) iota and numpy's arange, spelled `tf.iota(shape, dtype,
axis=0)` and `tf.arange([start,] stop[, step], dtype=None)`."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor import Iota
from tilefoundry.ir.types import DimVar, bf16, f32, i32, i64, make_tensor_type, u8
from tilefoundry.rules import EVAL

N = DimVar("N", 1, 64)

# (id, op attributes, expected type | error regex)
CASES = [
    ("1-D", {"shape": (5,), "dtype": i32}, make_tensor_type((5,), i32)),
    ("broadcasted", {"shape": (2, 3), "dtype": f32, "axis": 1}, make_tensor_type((2, 3))),
    ("negative axis", {"shape": (2, 3), "dtype": u8, "axis": -2}, make_tensor_type((2, 3), u8)),
    ("symbolic", {"shape": (N,), "dtype": i64}, make_tensor_type((N,), i64)),
    ("rank 0", {"shape": (), "dtype": i32}, r"rank-0 shape has no axis"),
    ("axis range", {"shape": (4,), "dtype": i32, "axis": 1}, r"axis 1 is out of range"),
    ("bool", {"shape": (4,), "dtype": "bool"}, r"bool cannot hold a count"),
    ("fractional int step", {"shape": (4,), "dtype": i32, "step": 0.5}, r"step 0.5 is not an"),
]  # fmt: skip


@pytest.mark.parametrize(("attrs", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(attrs, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(Iota(**attrs))
    else:
        assert typeinfer_call(Iota(**attrs)) == expected


def _eval(call):
    return EVAL.lookup(Iota)(call.target, (), call.type)


@pytest.mark.parametrize(
    ("args", "dtype", "numpy_dtype"),
    [((7,), None, np.int64), ((2, 9), None, np.int64), ((9, 2, -3), None, np.int64),
     ((0.0, 1.0, 0.1), None, np.float32), ((-1.5, 2.0, 0.25), None, np.float32),
     ((5,), "f32", np.float32), ((3, 3), None, np.int64), ((0, 10, 3), "i32", np.int32)],
)  # fmt: skip
def test_arange_is_numpys(args, dtype, numpy_dtype):
    """numpy computes the values in float64 (or the integer dtype); the result rounds once."""
    got = _eval(tf.arange(*args, dtype=dtype))
    want = np.arange(*args).astype(numpy_dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_arange_dtype_follows_the_python_numbers():
    assert tf.arange(4).type == make_tensor_type((4,), i64)
    assert tf.arange(4.0).type == make_tensor_type((4,), f32)
    assert tf.arange(4, dtype=bf16).type == make_tensor_type((4,), bf16)


def test_arange_refusals_name_the_argument():
    with pytest.raises(VerifyError, match=r"tf.arange: step must not be zero"):
        tf.arange(0, 4, 0)
    with pytest.raises(VerifyError, match=r"tf.arange: stop must be a compile-time number"):
        tf.arange(0, "4")
    with pytest.raises(VerifyError, match=r"tf.arange: arange\(\) takes from 1 to 4"):
        tf.arange(1, 2, 3, "i32", 5)


def test_iota_counts_along_its_axis_and_integers_wrap():
    got = _eval(tf.iota((2, 3), "i32", axis=1))
    np.testing.assert_array_equal(got, [[0, 1, 2], [0, 1, 2]])
    wrapped = _eval(tf.iota((3,), "u8", start=250, step=3))
    np.testing.assert_array_equal(wrapped, np.array([250, 253, 0], np.uint8))
