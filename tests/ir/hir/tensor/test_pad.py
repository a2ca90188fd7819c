"""Pad: StableHLO's pad (edge, interior and negative padding by a constant), its typing and
sharding rules, the kernel against numpy, and Pad as the exact transpose of Slice."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor import Pad, Slice
from tilefoundry.ir.hir.tensor.pad import pad_undoing
from tilefoundry.ir.types import (
    DimVar,
    bool_,
    f8e8m0,
    f32,
    f64,
    i8,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
)
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 2), ("x", "y"))
N = DimVar("N", 1, 64)
M = DimVar("M", 0, 64)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def pad(low, high, interior=None, value=0):
    return Pad(low=low, high=high, interior=interior, value=value)


# (id, op, operand, expected type | error regex)
CASES = [
    # extent = low + high + n + max(n - 1, 0) * interior (StableHLO pad)
    ("edges", pad((1, 0), (2, 3)), plain((4, 8)), plain((7, 11))),
    ("interior", pad((0,), (0,), (2,)), plain((4,)), plain((10,))),
    ("interior of one element", pad((0,), (0,), (5,)), plain((1,)), plain((1,))),
    ("interior of an empty axis", pad((1,), (1,), (3,)), plain((0,)), plain((2,))),
    ("negative edges crop", pad((-1, 0), (-2, 0)), plain((8, 3)), plain((5, 3))),
    ("negative edge after interior", pad((1, -1), (1, -1), (0, 1)), plain((5, 4), i32),
     plain((7, 5), i32)),
    ("crop to nothing", pad((-2,), (-2,)), plain((4,)), plain((0,))),
    ("crop past nothing", pad((-3,), (-2,)), plain((4,)), r"axis 0 .* negative extent -1"),
    ("rank 0", pad((), ()), plain(()), plain(())),
    ("dtype and storage kept", pad((1,), (1,)), plain((4,), i8, "smem"), plain((6,), i8, "smem")),
    ("bool", pad((1,), (0,), value=True), plain((2,), bool_), plain((3,), bool_)),
    # symbolic extents: an unpadded axis passes through, a padded one grows affinely
    ("symbolic, untouched", pad((0, 1), (0, 1)), plain((N, 4)), plain((N, 6))),
    ("symbolic, edges", pad((2,), (1,)), plain((N,)), plain((N + 3,))),
    ("symbolic, interior", pad((0,), (0,), (1,)), plain((N,)), plain((2 * N - 1,))),
    ("symbolic, negative", pad((-1,), (0,)), plain((N,)), r"symbolic extent N; negative edge"),
    ("symbolic, maybe empty", pad((0,), (0,), (1,)), plain((M,)), r"possibly empty axis"),
    # attribute shapes and values
    ("too few entries", pad((1,), (1,)), plain((4, 4)), r"one entry per axis .*rank 2"),
    ("interior length", pad((1, 1), (1, 1), (0,)), plain((4, 4)), r"one entry per axis"),
    ("fractional int value", pad((1,), (0,), value=0.5), plain((4,), i32), r"not an integer"),
    ("integral float value", pad((1,), (0,), value=3.0), plain((4,), i32), plain((5,), i32)),
    ("value out of range", pad((1,), (0,), value=-1), plain((4,), u8), r"does not fit u8"),
    ("bool value", pad((1,), (0,), value=2), plain((4,), bool_), r"not a bool"),
    ("scale format", pad((1,), (0,)), plain((4,), f8e8m0), r"0 is not positive, and f8e8m0"),
    # Sharding: a Split on an axis left alone carries; on a padded axis it fails closed
    ("Split elsewhere", pad((0, 1), (0, 1)), sharded((8, 4), X, S(0)), sharded((8, 6), X, S(0))),
    ("Split padded", pad((1, 0), (0, 0)), sharded((8, 4), X, S(0)),
     r"'x' is Split on mesh axis 0 \('x'\) along axis 0, and that axis is padded.*reshard\(x"),
    ("Split interior", pad((0, 0), (0, 0), (1, 0)), sharded((8, 4), X, S(0)), r"axis is padded"),
    # Partial: max/min always carry (padding is one constant), sum only with a zero constant
    ("Partial sum, zero", pad((0, 1), (0, 1)), sharded((4, 4), X, P("sum")),
     sharded((4, 6), X, P("sum"))),
    ("Partial sum, nonzero", pad((0, 1), (0, 1), value=1.0), sharded((4, 4), X, P("sum")),
     r"Partial\(sum\) on mesh axis 0 \('x'\).*padding constant 1.0"),
    ("Partial max, nonzero", pad((1,), (1,), value=-np.inf), sharded((4,), X, P("max")),
     sharded((6,), X, P("max"))),
    ("Partial min + Split", pad((0, 2), (0, 0), value=7.0), sharded((4, 4), XY, P("min"), S(0)),
     sharded((4, 6), XY, P("min"), S(0))),
]  # fmt: skip


@pytest.mark.parametrize(("op", "x", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(op, x, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


def test_negative_interior_is_refused_when_the_op_is_built():
    with pytest.raises(VerifyError, match=r"Pad: attribute 'interior': .* cannot be negative"):
        Pad(low=(0,), high=(0,), interior=(-1,))


KERNEL = EVAL.lookup(Pad)


def _run(op, x):
    return KERNEL(
        op, (x,), typeinfer_call(op, plain(x.shape, f32 if x.dtype == np.float32 else i32))
    )


def test_edges_are_numpys_constant_pad():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = _run(pad((1, 0), (2, 3), value=-5.0), x)
    np.testing.assert_array_equal(got, np.pad(x, ((1, 2), (0, 3)), constant_values=-5.0))


def _interior_reference(x, low, high, interior, value):
    """Element by element: x[i] lands at low + i * (interior + 1); everything else is value."""
    shape = [
        lo + hi + n + max(n - 1, 0) * s
        for n, lo, hi, s in zip(x.shape, low, high, interior, strict=True)
    ]
    out = np.full(shape, value, x.dtype)
    for index in np.ndindex(*x.shape):
        target = tuple(lo + i * (s + 1) for i, lo, s in zip(index, low, interior, strict=True))
        if all(0 <= t < e for t, e in zip(target, shape, strict=True)):
            out[target] = x[index]
    return out


@pytest.mark.parametrize(
    ("low", "high", "interior"),
    [((0, 0), (0, 0), (1, 2)), ((2, -1), (-3, 1), (1, 0)), ((-1, -2), (-1, -1), (2, 2))],
)
def test_interior_and_negative_padding_place_each_element(low, high, interior):
    x = np.arange(1, 13, dtype=np.int32).reshape(3, 4)
    want = _interior_reference(x, low, high, interior, -1)
    np.testing.assert_array_equal(_run(pad(low, high, interior, -1), x), want)


@st.composite
def _slices(draw):
    """A random strided Slice of a random 1-3 axis shape (numpy's clamped indices included)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    begin, end, steps = [], [], []
    for extent in shape:
        begin.append(draw(st.integers(-extent - 1, extent + 1)))
        end.append(draw(st.integers(-extent - 1, extent + 1)))
        steps.append(draw(st.integers(1, 3)))
    return shape, Slice(begin=tuple(begin), end=tuple(end), strides=tuple(steps))


@settings(max_examples=60, deadline=None)
@given(_slices(), st.integers(0, 2**31 - 1))
def test_pad_is_the_transpose_of_slice(case, seed):
    """<slice(x), y> == <x, pad(y)> for every x, y: the defining property of a transpose (the
    VJP of Slice). Checked on random data for random strided, clamped and empty windows."""
    shape, op = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    sliced = EVAL.lookup(Slice)(op, (x,), None)
    y = rng.standard_normal(sliced.shape)
    undo = pad_undoing(op, shape)
    assert typeinfer_call(undo, plain(sliced.shape)).shape == shape
    padded = KERNEL(undo, (y,), plain(shape, f64))
    assert padded.shape == shape
    np.testing.assert_allclose(np.vdot(sliced, y), np.vdot(x, padded), atol=1e-9)
