"""Cumulative: running sum / product / max / min along an axis (numpy cumsum, cumprod,
maximum.accumulate, minimum.accumulate), its typing and sharding rules, and the kernel."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Var
from tilefoundry.ir.hir.tensor import Cumulative, CumulativeKind
from tilefoundry.ir.types import (
    bf16,
    bool_,
    f32,
    f64,
    i8,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
SUM, PROD, MAX, MIN = CumulativeKind


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def cum(kind, axis=1, reverse=False):
    return Cumulative(axis=axis, kind=kind, reverse=reverse)


# (id, op, operand, expected type | error regex)
CASES = [
    ("sum", cum(SUM), plain((4, 8)), plain((4, 8))),
    ("dtype and storage", cum(MAX, -1), plain((4, 8), i8, "smem"), plain((4, 8), i8, "smem")),
    ("rank 0", cum(SUM, 0), plain(()), r"rank-0 scalar"),
    ("bool", cum(MAX, 0), plain((4,), bool_), r"bool, which has no running max.*cast\(x, i32\)"),
    ("axis range", cum(SUM, 2), plain((4, 8)), r"axis 2 is out of range for rank 2"),
    # a Split on the scanned axis fails closed; elsewhere it carries
    ("Split elsewhere", cum(PROD, 1), sharded((8, 4), X, S(0)), sharded((8, 4), X, S(0))),
    ("Split scanned", cum(SUM, 0), sharded((8, 4), X, S(0)),
     r"'x' is Split on mesh axis 0 \('x'\) along axis 0, and the running sum along it needs "
     r"every earlier element"),
    # a pending reduction carries when it is the scan's own combiner
    ("sum of sums", cum(SUM), sharded((4, 8), X, P("sum")), sharded((4, 8), X, P("sum"))),
    ("max of maxes", cum(MAX), sharded((4, 8), X, P("max")), sharded((4, 8), X, P("max"))),
    ("min of mins", cum(MIN), sharded((4, 8), X, P("min")), sharded((4, 8), X, P("min"))),
    ("sum of maxes", cum(SUM), sharded((4, 8), X, P("max")),
     r"Partial\(max\) on mesh axis 0 \('x'\), and a running sum commutes only with a pending "
     r"sum"),
    ("max of sums", cum(MAX), sharded((4, 8), X, P("sum")), r"commutes only with a pending max"),
    ("product", cum(PROD), sharded((4, 8), X, P("sum")), r"commutes only with a pending nothing"),
]  # fmt: skip


@pytest.mark.parametrize(("op", "x", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(op, x, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


KERNEL = EVAL.lookup(Cumulative)
NUMPY = {
    SUM: lambda a, axis: np.cumsum(a, axis),
    PROD: lambda a, axis: np.cumprod(a, axis),
    MAX: np.maximum.accumulate,
    MIN: np.minimum.accumulate,
}


@pytest.mark.parametrize("kind", list(CumulativeKind))
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_kernel_is_numpys_scan(kind, axis, reverse):
    x = np.random.default_rng(3).standard_normal((3, 4, 5))
    want = NUMPY[kind](x, axis)
    if reverse:
        want = np.flip(NUMPY[kind](np.flip(x, axis), axis), axis)
    got = KERNEL(cum(kind, axis, reverse), (x,), plain(x.shape, f64))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_integer_sums_wrap_in_their_dtype():
    x = np.full(4, 100, np.int8)
    got = KERNEL(cum(SUM, 0), (x,), plain((4,), i8))
    assert got.dtype == np.int8 and got.tolist() == [100, -56, 44, -112]


def test_narrow_floats_accumulate_in_f32_and_round_once():
    x = np.array([256.0] + [1.0] * 8, ml_dtypes.bfloat16)  # each +1 alone rounds away in bf16
    got = KERNEL(cum(SUM, 0), (x,), plain(x.shape, bf16))
    assert float(got[-1]) == 264.0


def test_nan_propagates_through_a_running_max():
    x = np.array([1.0, np.nan, 3.0])
    got = KERNEL(cum(MAX, 0), (x,), plain((3,), f64))
    assert got[0] == 1.0 and np.isnan(got[1:]).all()


def test_surface_names_fix_the_kind():
    v = Var("x", make_tensor_type((4, 8), f32))
    for name, kind in (("cumsum", SUM), ("cumprod", PROD), ("cummax", MAX), ("cummin", MIN)):
        call = getattr(tf, name)(v, 1, reverse=True)
        assert call.target == Cumulative(axis=1, kind=kind, reverse=True)
