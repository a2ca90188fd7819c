"""Transpose: numpy.transpose semantics; Splits follow their logical axes; Partials carry."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor.transpose import Transpose
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    f32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 128)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


# (id, perm, operand, expected type | error regex)
CASES = [
    # consensus numpy.transpose: out.shape[j] = x.shape[perm[j]]
    ("2-D", (1, 0), plain((16, 8)), plain((8, 16))),
    ("3-D", (2, 0, 1), plain((2, 3, 4), i64, "rmem"), plain((4, 2, 3), i64, "rmem")),
    ("default reverses", None, plain((2, 3, 4)), plain((4, 3, 2))),
    ("negative axes", (-1, 0, -2), plain((2, 3, 4)), plain((4, 2, 3))),
    ("rank 0", (), plain(()), plain(())),
    ("symbolic", (1, 0), plain((N, 8)), plain((8, N))),
    ("not a permutation", (0, 0), plain((2, 3)), r"Transpose: perm \(0, 0\) is not a permutation"),
    ("wrong length", (0,), plain((2, 3)), r"perm \(0,\) has 1 entries but operand 'x' has rank 2"),
    ("out of range", (0, 2), plain((2, 3)), r"perm entry 2 is out of range for rank 2"),
    # semantic-analysis §3.2 rule 2: the Split follows its logical axis through the permutation
    ("Split moves", (1, 0), sharded((16, 8), X, S(0)), sharded((8, 16), X, S(1))),
    ("two Splits move", (1, 0), sharded((16, 8), XY, S(1), S(0)), sharded((8, 16), XY, S(0), S(1))),
    ("3-D Split", (2, 0, 1), sharded((8, 4, 16), XY, B, S(2)), sharded((16, 8, 4), XY, B, S(0))),
    # rule 5: a fully-Broadcast input is replicated: no layout
    ("Broadcast", (1, 0), sharded((16, 8), XY, B, B), plain((8, 16))),
    # rule 4: a permutation commutes with every reduction, each Partial keeps its mesh axis
    ("Partial sum", (1, 0), sharded((16, 8), XY, B, P("sum")), sharded((8, 16), XY, B, P("sum"))),
    ("Partial max + Split", (1, 0), sharded((16, 8), XY, P("max"), S(1)),
     sharded((8, 16), XY, P("max"), S(0))),
    ("Partial min", (1, 0), sharded((16, 8), X, P("min")), sharded((8, 16), X, P("min"))),
    # §3.1: a Split position straddling logical axes fails closed, named after the op
    ("straddling Split", (1, 0), make_tensor_type(
        (4, 6), f32, layout=ShardLayout(Layout((2, 4, 3)), (S(1),), X)),
     r"Transpose: shard propagation.*canonical regroup"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("perm", "x", "expected"), [pytest.param(*row[1:], id=row[0]) for row in CASES]
)
def test_typeinfer(perm, x, expected):
    op = Transpose(perm=perm)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


def test_tuple_operand_is_refused():
    with pytest.raises(VerifyError, match="Transpose: operand 'x' must be a tensor"):
        typeinfer_call(Transpose(perm=(0,)), TupleType((plain((4,)),)))


KERNEL = EVAL.lookup(Transpose)


def test_kernel_against_literal():
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    assert KERNEL(Transpose(perm=(1, 0)), (x,), plain((3, 2))).tolist() == [[1, 4], [2, 5], [3, 6]]


def test_kernel_3d_by_index_arithmetic():
    x = np.arange(24).reshape(2, 3, 4)
    out = KERNEL(Transpose(perm=(2, 0, -2)), (x,), plain((4, 2, 3)))
    for i, j, k in [(0, 0, 0), (3, 1, 2), (1, 0, 2)]:
        assert out[i, j, k] == x[j, k, i]


def test_kernel_default_narrow_and_empty():
    x = np.array([[1.5, -2.0, 0.5]], dtype=ml_dtypes.bfloat16)
    out = KERNEL(Transpose(), (x,), make_tensor_type((3, 1), bf16))
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).ravel().tolist() == [1.5, -2.0, 0.5]
    f8 = np.ones((2, 0, 3), dtype=ml_dtypes.float8_e4m3fn)
    assert KERNEL(Transpose(perm=(1, 2, 0)), (f8,), plain((0, 3, 2))).shape == (0, 3, 2)
