"""Slice: numpy basic slicing with static begin/end/strides, integer indices via squeeze_axes."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_structure import AffineAxis, ConstantAxis, Projection
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.slice import Slice
from tilefoundry.ir.types import DimVar, bf16, f32, i32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
SEQ = DimVar("SEQ", 1, 64)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def op(begin, end, strides=None, squeeze_axes=()):
    return Slice(begin=begin, end=end, strides=strides, squeeze_axes=squeeze_axes)


# (id, op, operand, expected type | error regex)
# hir §1.3 math: a sub-tensor is written as a subscript (x[:, :, j:j + 1]), which resolves to
# slice(x, begin=, end=, strides=); Slice is a consensus op (numpy semantics, DESIGN §3)
CASES = [
    # numpy: extent = len(range(*slice(b, e, s).indices(n)))
    ("window", op((2,), (6,)), plain((16, 8)), plain((4, 8))),
    ("two axes", op((0, 1), (3, 7), (1, 2)), plain((16, 8)), plain((3, 3))),
    ("negative begin", op((-3,), (None,)), plain((16,)), plain((3,))),
    ("negative end", op((None,), (-2,)), plain((16,)), plain((14,))),
    ("clamped end", op((10,), (100,)), plain((16,)), plain((6,))),
    ("clamped begin", op((-100,), (2,)), plain((16,)), plain((2,))),
    ("empty window", op((5,), (2,)), plain((16,)), plain((0,))),
    ("step rounds up", op((1,), (8,), (3,)), plain((8,)), plain((3,))),
    ("dtype and storage kept", op((0,), (2,)), plain((4,), i32, "smem"), plain((2,), i32, "smem")),
    ("trailing axes whole", op((), ()), plain((2, 3)), plain((2, 3))),
    # step > 0 only (the seed names no other)
    ("zero step", op((0,), (4,), (0,)), plain((8,)), r"Slice: axis 0 has step 0"),
    ("negative step", op((None,), (None,), (-1,)), plain((8,)), r"step -1; only a positive"),
    ("too many axes", op((0, 0), (1, 1)), plain((4,)), r"2 sliced axes for operand 'x' of rank 1"),
    ("length mismatch", op((0, 0), (1,)), plain((4, 4)), r"must have the same length"),
    # x[i]: squeeze_axes drops an axis selecting exactly one element
    ("int index", op((None, 3), (None, 4), None, (1,)), plain((16, 8)), plain((16,))),
    ("negative squeeze axis", op((2,), (3,), None, (-2,)), plain((4, 5)), plain((5,))),
    ("squeeze of a wide window", op((0,), (2,), None, (0,)), plain((4,)), r"holds 2 elements"),
    ("squeeze twice", op((0,), (1,), None, (0, -1)), plain((4,)), r"names an axis twice"),
    # symbolic extents: only the whole axis (indices cannot be normalised statically)
    ("symbolic whole", op((None, 1), (None, 3)), plain((SEQ, 8)), plain((SEQ, 2))),
    ("symbolic window", op((0,), (4,)), plain((SEQ,)), r"symbolic extent SEQ.*whole axis"),
    # DESIGN §4.14: a window inside the smallest extent (SEQ >= 1) is provably in range
    ("symbolic window inside the lower bound", op((0,), (1,)), plain((SEQ, 8)), plain((1, 8))),
    ("symbolic window, negative end", op((0,), (-1,)), plain((SEQ,)), r"symbolic extent SEQ"),
    # a Split on an axis taken whole carries; on an untouched axis it carries
    ("Split on untouched axis", op((None, 2), (None, 6)), sharded((16, 8), X, S(0)),
     sharded((16, 4), X, S(0))),
    ("Split on trailing axis", op((1,), (3,)), sharded((4, 8), XY, B, S(1)),
     sharded((2, 8), XY, B, S(1))),
    ("Split, axis dropped before it", op((2,), (3,), None, (0,)), sharded((4, 8), X, S(1)),
     sharded((8,), X, S(0))),
    ("Split on axis sliced whole", op((0,), (16,)), sharded((16,), X, S(0)),
     sharded((16,), X, S(0))),
    # a Split on a sliced axis whose slice is not the whole axis fails closed (translated access)
    ("Split windowed at 0", op((0,), (8,)), sharded((16, 8), X, S(0)),
     r"Split on mesh axis 0 \('x'\) along axis 0.*reshard\(x, \.\.\.\) to Broadcast"),
    ("Split strided", op((None,), (None,), (2,)), sharded((16,), X, S(0)), r"takes only part"),
    ("Split indexed", op((0,), (1,), None, (0,)), sharded((4, 8), X, S(0)), r"takes only part"),
    ("Split on y windowed", op((None, 1), (None, 5)), sharded((4, 8), XY, B, S(1)),
     r"mesh axis 1 \('y'\) along axis 1"),
    # selection commutes with every reduction: Partials carry on their mesh axis
    ("Partial sum", op((1,), (3,)), sharded((4, 8), XY, B, P("sum")),
     sharded((2, 8), XY, B, P("sum"))),
    ("Partial max + Split", op((None, 1), (None, 2), None, (1,)),
     sharded((4, 8), XY, P("max"), S(0)), sharded((4,), XY, P("max"), S(0))),
    ("Partial min", op((0,), (1,)), sharded((4,), X, P("min")), sharded((1,), X, P("min"))),
    ("Broadcast", op((0,), (1,)), sharded((4,), XY, B, B), plain((1,))),
]  # fmt: skip


@pytest.mark.parametrize(("op", "x", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(op, x, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


def test_output_extent_matches_numpy():
    for n in (0, 1, 5, 16):
        for b in (None, -20, -3, 0, 2, 7, 30):
            for e in (None, -20, -1, 0, 3, 16, 30):
                for s in (None, 1, 2, 5):
                    out = typeinfer_call(op((b,), (e,), (s,)), plain((n,)))
                    assert out.shape == (len(np.arange(n)[b:e:s]),), (n, b, e, s)


def test_bad_attributes():
    with pytest.raises(VerifyError, match="static ints or None"):
        op((1.5,), (2,))
    with pytest.raises(VerifyError, match="must be a tuple"):
        Slice(begin=1, end=(2,))


def test_relation_reads_the_window():
    relations = relations_of(
        op((None, 2, 1), (None, 8, 2), (None, 3, 1), (2,)), (plain((4, 8, 5)),)
    )
    assert relations.inputs[0].pattern.axes == (
        Projection(0),
        AffineAxis((0, 3), (), 2),
        ConstantAxis(1),
    )
    assert relations.outputs[0].pattern.axes == (Projection(0), Projection(1))


KERNEL = EVAL.lookup(Slice)


def test_kernel_against_literal():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = KERNEL(op((1, -3), (None, None), (1, 2)), (x,), plain((2, 2)))
    assert out.tolist() == [[5, 7], [9, 11]]


def test_kernel_int_index_and_clamp():
    x = np.arange(24).reshape(2, 3, 4)
    out = KERNEL(op((None, -1), (None, None), None, (1,)), (x,), plain((2, 4)))
    assert out.tolist() == [[8, 9, 10, 11], [20, 21, 22, 23]]
    assert KERNEL(op((5,), (100,)), (x,), plain((0, 3, 4))).shape == (0, 3, 4)


def test_kernel_narrow_floats():
    x = np.array([1.5, -2.0, 0.25, 4.0], dtype=ml_dtypes.bfloat16)
    out = KERNEL(op((1,), (None,), (2,)), (x,), make_tensor_type((2,), bf16))
    assert out.dtype == ml_dtypes.bfloat16 and out.astype(np.float32).tolist() == [-2.0, 4.0]
    f8 = np.array([[0.5, 1.0], [2.0, 3.0]], dtype=ml_dtypes.float8_e4m3fn)
    out = KERNEL(op((1,), (2,), None, (0,)), (f8,), plain((2,)))
    assert out.astype(np.float32).tolist() == [2.0, 3.0]
