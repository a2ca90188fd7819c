"""ShapeOf and Rank: i64 umat shape metadata that ignores sharding and reads no element."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_structure import PiecewiseAxis, Projection
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.shape_of import Rank, ShapeOf
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    f32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.rules import EVAL

XY = make_mesh((2, 4), ("x", "y"))
SEQ = DimVar("SEQ", 1, 64)


def umat(shape):
    return make_tensor_type(shape, i64, "umat")


# (id, operand, ShapeOf type, Rank type)
# ShapeOf / Rank are consensus ops (DESIGN §3): they read shapes, never values, so sharding
# and pending Partials do not matter (types §2: shape elements are umat)
CASES = [
    ("matrix", make_tensor_type((16, 8), f32), umat((2,)), umat(())),
    ("scalar", make_tensor_type((), bf16, "rmem"), umat((0,)), umat(())),
    ("symbolic", make_tensor_type((SEQ, 4, 4), f32), umat((3,)), umat(())),
    # both ignore sharding: a Split or pending Partial changes nothing of the logical shape
    ("sharded Partial", make_shard_tensor_type((16, 8), f32, mesh=XY, attrs=(S(0), P("sum"))),
     umat((2,)), umat(())),
]  # fmt: skip


@pytest.mark.parametrize(
    ("x", "shape_type", "rank_type"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(x, shape_type, rank_type):
    assert typeinfer_call(ShapeOf(), x) == shape_type
    assert typeinfer_call(Rank(), x) == rank_type


@pytest.mark.parametrize("op", [ShapeOf(), Rank()], ids=["ShapeOf", "Rank"])
def test_tuple_operand_is_refused(op):
    with pytest.raises(VerifyError, match=f"{type(op).__name__}: operand 'x' must be a tensor"):
        typeinfer_call(op, TupleType((make_tensor_type((2,)),)))


def test_relations_read_no_element():
    x = (make_tensor_type((16, 8), f32),)
    shape_of = relations_of(ShapeOf(), x)
    assert all(isinstance(a, PiecewiseAxis) and not a.dims for a in shape_of.inputs[0].pattern.axes)
    assert shape_of.inputs[0].pattern.relation.is_empty()
    assert shape_of.outputs[0].pattern.axes == (Projection(0),)
    rank = relations_of(Rank(), x)
    assert rank.inputs[0].pattern.relation.is_empty() and rank.domain_rank == 0


def test_kernels():
    x = np.zeros((3, 0, 5), dtype=np.float32)
    shape = EVAL.lookup(ShapeOf)(ShapeOf(), (x,), umat((3,)))
    assert shape.dtype == np.int64 and shape.tolist() == [3, 0, 5]
    rank = EVAL.lookup(Rank)(Rank(), (x,), umat(()))
    assert rank.dtype == np.int64 and rank.shape == () and int(rank) == 3
    scalar = EVAL.lookup(ShapeOf)(ShapeOf(), (np.float32(1.0) * np.ones(()),), umat((0,)))
    assert scalar.shape == (0,) and scalar.dtype == np.int64
