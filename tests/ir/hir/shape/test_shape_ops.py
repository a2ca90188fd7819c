"""ShapeExtract and ShapeCompose: between rank-1 i64 shape values and rank-0 i64 dims."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_structure import ConstantAxis
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.shape.shape_ops import ShapeCompose, ShapeExtract
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
)
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
N = DimVar("N", 1, 16)
DIM = make_tensor_type((), i64, "umat")


def shape_value(rank, storage="umat", dtype=i64):
    return make_tensor_type((rank,), dtype, storage)


# (id, index, shape operand, expected type | error regex)
# hir §1.3 ShapeExtract: "The result is the dimension at index."
EXTRACT = [
    # hir ShapeExtract: the result is the dimension at index (a rank-0 i64 dim)
    ("first", 0, shape_value(3), DIM),
    ("last", 2, shape_value(3), DIM),
    ("negative", -1, shape_value(3), DIM),
    ("from a gmem shape tensor", 1, shape_value(2, "gmem"), DIM),
    ("out of range", 3, shape_value(3), r"ShapeExtract: index 3 is out of range.*rank 3"),
    ("negative out of range", -4, shape_value(3), r"index -4 is out of range"),
    ("rank 2 operand", 0, make_tensor_type((2, 2), i64), r"must be a shape value"),
    ("i32 operand", 0, shape_value(2, dtype=i32), r"must be a shape value.*i32"),
    ("symbolic length", 0, make_tensor_type((N,), i64), r"symbolic length N"),
    ("Broadcast shape value", 0, make_shard_tensor_type((3,), i64, mesh=X, attrs=(B,)), DIM),
    ("Split shape value", 0, make_shard_tensor_type((4,), i64, mesh=X, attrs=(S(0),)),
     r"operand 'shape' carries the sharding.*reshard\(shape"),
    ("Partial shape value", 0, make_shard_tensor_type((4,), i64, mesh=X, attrs=(P("sum"),)),
     r"operand 'shape' carries the sharding"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("index", "shape", "expected"), [pytest.param(*r[1:], id=r[0]) for r in EXTRACT]
)
def test_extract_typeinfer(index, shape, expected):
    op = ShapeExtract(index=index)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, shape)
    else:
        assert typeinfer_call(op, shape) == expected


def scalar(dtype=i64, storage="umat"):
    return make_tensor_type((), dtype, storage)


# (id, dims tuple, expected type | error regex)
# hir §1.3 ShapeCompose: "The result is a shape value assembled in input order."
COMPOSE = [
    # hir ShapeCompose: a shape value assembled in input order (rank-1 i64 umat)
    ("three dims", TupleType((scalar(),) * 3), shape_value(3)),
    ("empty shape", TupleType(()), shape_value(0)),
    ("any integer dtype", TupleType((scalar(i32, "gmem"), scalar(u8))), shape_value(2)),
    ("float dim", TupleType((scalar(f32),)), r"ShapeCompose: operand 'dims\[0\]' must be a rank-0"),
    ("rank-1 dim", TupleType((scalar(), make_tensor_type((1,), i64))), r"'dims\[1\]' must be"),
    ("not a tuple", shape_value(2), r"operand 'dims' must be a tuple"),
    ("nested tuple", TupleType((TupleType((scalar(),)),)), r"'dims\[0\]' must be a rank-0"),
    ("Partial dim", TupleType((make_shard_tensor_type((), i64, mesh=X, attrs=(P("sum"),)),)),
     r"'dims\[0\]' carries the sharding"),
]  # fmt: skip


@pytest.mark.parametrize(("dims", "expected"), [pytest.param(*r[1:], id=r[0]) for r in COMPOSE])
def test_compose_typeinfer(dims, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(ShapeCompose(), dims)
    else:
        assert typeinfer_call(ShapeCompose(), dims) == expected


def test_relations():
    extract = relations_of(ShapeExtract(index=-1), (shape_value(3),))
    assert extract.inputs[0].pattern.axes == (ConstantAxis(2),)
    assert extract.domain_rank == 0
    assert relations_of(ShapeCompose(), (TupleType((scalar(),)),)) is None


def test_extract_kernel():
    kernel = EVAL.lookup(ShapeExtract)
    shape = np.array([4, 0, 7], dtype=np.int64)
    out = kernel(ShapeExtract(index=-1), (shape,), DIM)
    assert out.dtype == np.int64 and out.shape == () and int(out) == 7
    assert int(kernel(ShapeExtract(index=1), (shape,), DIM)) == 0
    with pytest.raises(EvalError, match="out of range"):
        kernel(ShapeExtract(index=3), (shape,), DIM)


def test_compose_kernel():
    kernel = EVAL.lookup(ShapeCompose)
    dims = (np.array(4, dtype=np.int64), np.array(2, dtype=np.int32), np.array(9, dtype=np.uint8))
    out = kernel(ShapeCompose(), (dims,), shape_value(3))
    assert out.dtype == np.int64 and out.tolist() == [4, 2, 9]
    empty = kernel(ShapeCompose(), ((),), shape_value(0))
    assert empty.shape == (0,) and empty.dtype == np.int64
