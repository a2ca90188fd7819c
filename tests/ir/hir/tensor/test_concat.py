"""Concat and Stack: one tuple operand; numpy semantics; storage anchoring; Split/Partial rules."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.concat import Concat, Stack
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    f16,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def tup(*fields):
    return TupleType(fields)


# (id, op, operand tuple, expected type | error regex)
CASES = [
    # numpy.concatenate: shapes match except on the axis, which sums
    ("concat axis 0", Concat(axis=0), tup(plain((2, 3)), plain((4, 3))), plain((6, 3))),
    ("concat axis -1", Concat(axis=-1), tup(plain((2, 3)), plain((2, 1)), plain((2, 0))),
     plain((2, 4))),
    ("concat one operand", Concat(), tup(plain((5,), i32)), plain((5,), i32)),
    ("concat symbolic", Concat(axis=0), tup(plain((N, 4)), plain((N, 4))), plain((2 * N, 4))),
    ("concat extent mismatch", Concat(axis=0), tup(plain((2, 3)), plain((2, 4))),
     r"Concat: operand 'values\[1\]' has extent 4 on axis 1 but 'values\[0\]' has 3"),
    ("concat rank mismatch", Concat(), tup(plain((2, 3)), plain((2,))),
     r"'values\[1\]' has rank 1 but 'values\[0\]' has rank 2"),
    ("concat rank 0", Concat(), tup(plain(()), plain(())), r"rank-0 scalars.*use stack"),
    ("concat axis out of range", Concat(axis=2), tup(plain((2, 3))), r"axis 2 is out of range"),
    # numpy.stack: equal shapes, a new axis of extent len(values)
    ("stack axis 0", Stack(axis=0), tup(plain((2, 3)), plain((2, 3))), plain((2, 2, 3))),
    ("stack axis -1", Stack(axis=-1), tup(*(plain((2, 3)),) * 3), plain((2, 3, 3))),
    ("stack scalars", Stack(), tup(plain(()), plain(())), plain((2,))),
    ("stack shape mismatch", Stack(), tup(plain((2, 3)), plain((3, 2))), r"shapes must match"),
    ("stack axis out of range", Stack(axis=3), tup(plain((2, 3))), r"axis 3 is out of range"),
    # no implicit promotion
    ("dtype mismatch", Concat(), tup(plain((2,)), plain((2,), f16)),
     r"operand 'values\[1\]' is f16 but 'values\[0\]' is f32"),
    # the single operand is a non-empty tuple of tensors
    ("not a tuple", Concat(), plain((2,)), r"operand 'values' must be a non-empty tuple"),
    ("empty tuple", Stack(), tup(), r"non-empty tuple"),
    ("nested tuple", Concat(), tup(tup(plain((2,)))), r"'values\[0\]' must be a tensor"),
    # semantic-analysis §3.3: storage anchors on the concrete operands; umat abstains
    ("anchor on smem", Concat(), tup(plain((2,), f32, "umat"), plain((2,), f32, "smem")),
     plain((4,), f32, "smem")),
    ("all umat", Stack(), tup(*(plain((2,), f32, "umat"),) * 2), plain((2, 2), f32, "umat")),
    ("storages disagree", Concat(), tup(plain((2,), f32, "smem"), plain((2,), f32, "gmem")),
     r"Concat: operands live in different storages"),
    # Split off the joined axis: carried, and it must agree across operands (engine rule 6)
    ("Split elsewhere", Concat(axis=1), tup(sharded((16, 8), X, S(0)), sharded((16, 4), X, S(0))),
     sharded((16, 12), X, S(0))),
    ("Split on one operand", Concat(axis=1), tup(sharded((16, 8), X, S(0)), plain((16, 4))),
     sharded((16, 12), X, S(0))),
    ("stack Split moves", Stack(axis=0), tup(*(sharded((16, 8), XY, B, S(1)),) * 2),
     sharded((2, 16, 8), XY, B, S(2))),
    ("Splits disagree", Concat(axis=1),
     tup(sharded((16, 8), XY, S(0), B), sharded((16, 4), XY, B, S(0))),
     r"Concat: shard propagation.*rule 6"),
    # Split on the joined axis fails closed
    ("Split on concat axis", Concat(axis=0), tup(sharded((16, 8), X, S(0)), plain((4, 8))),
     r"'values\[0\]' is Split on mesh axis 0 \('x'\) along the concat axis 0.*reshard"),
    ("Split on concat axis, 2nd", Concat(axis=-1), tup(plain((4, 8)), sharded((4, 8), XY, B, S(1))),
     r"'values\[1\]' is Split on mesh axis 1 \('y'\) along the concat axis 1"),
    # Partial on the same mesh axis on EVERY operand carries (concat selects, so it commutes)
    ("Partial sum on all", Concat(axis=0),
     tup(sharded((4, 8), XY, B, P("sum")), sharded((2, 8), XY, B, P("sum"))),
     sharded((6, 8), XY, B, P("sum"))),
    ("Partial max on all + Split", Stack(axis=0),
     tup(sharded((4, 8), XY, P("max"), S(1)), sharded((4, 8), XY, P("max"), S(1))),
     sharded((2, 4, 8), XY, P("max"), S(2))),
    # a Partial on some operands but not others rejects
    ("Partial on one operand", Concat(axis=0), tup(sharded((4, 8), X, P("sum")), plain((2, 8))),
     r"'values\[0\]' carries Partial\(sum\) on mesh axis 0 \('x'\) but 'values\[1\]' does not"
     r".*reshard\(values\[0\], \.\.\.\) to Broadcast on mesh axis 0"),
    ("Partial vs Broadcast", Stack(),
     tup(sharded((4,), XY, B, B), sharded((4,), XY, B, P("max"))),
     r"'values\[1\]' carries Partial\(max\) on mesh axis 1 \('y'\) but 'values\[0\]' does not"),
    ("Partial on other axis", Concat(),
     tup(sharded((4,), XY, P("sum"), B), sharded((4,), XY, B, P("sum"))),
     r"'values\[0\]' carries Partial\(sum\) on mesh axis 0"),
    ("Partial reductions differ", Concat(),
     tup(sharded((4,), X, P("sum")), sharded((4,), X, P("max"))),
     r"Partial\(sum\) on mesh axis 0 \('x'\) but 'values\[1\]' does not"),
    ("fully Broadcast", Concat(), tup(sharded((4,), XY, B, B), plain((4,))), plain((8,))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "values", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(op, values, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, values)
    else:
        assert typeinfer_call(op, values) == expected


def test_storage_anchoring_is_order_independent():
    a, b = plain((2,), f32, "umat"), plain((2,), f32, "rmem")
    assert typeinfer_call(Concat(), tup(a, b)) == typeinfer_call(Concat(), tup(b, a))


def test_tuple_operand_has_no_affine_relation():
    assert relations_of(Concat(), (tup(plain((2,))),)) is None
    assert relations_of(Stack(), (tup(plain((2,))),)) is None


def test_concat_kernel():
    a = np.array([[1, 2]], dtype=np.float32)
    b = np.array([[3, 4], [5, 6]], dtype=np.float32)
    kernel = EVAL.lookup(Concat)
    assert kernel(Concat(axis=0), ((a, b),), plain((3, 2))).tolist() == [[1, 2], [3, 4], [5, 6]]
    assert kernel(Concat(axis=-1), ((b, b),), plain((2, 4))).tolist() == [
        [3, 4, 3, 4],
        [5, 6, 5, 6],
    ]
    empty = np.zeros((0, 2), dtype=np.float32)
    assert kernel(Concat(axis=0), ((empty, a),), plain((1, 2))).tolist() == [[1, 2]]


def test_stack_kernel():
    a = np.array([1, 2, 3])
    b = np.array([4, 5, 6])
    kernel = EVAL.lookup(Stack)
    assert kernel(Stack(axis=0), ((a, b),), plain((2, 3))).tolist() == [[1, 2, 3], [4, 5, 6]]
    assert kernel(Stack(axis=-1), ((a, b),), plain((3, 2))).tolist() == [[1, 4], [2, 5], [3, 6]]
    scalars = (np.array(1.0), np.array(2.0))
    assert kernel(Stack(), (scalars,), plain((2,))).tolist() == [1.0, 2.0]


def test_kernels_keep_narrow_floats():
    a = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    b = np.array([0.25], dtype=ml_dtypes.bfloat16)
    out = EVAL.lookup(Concat)(Concat(), ((a, b),), make_tensor_type((3,), bf16))
    assert out.dtype == ml_dtypes.bfloat16 and out.astype(np.float32).tolist() == [1.5, -2.0, 0.25]
    f8 = np.array([0.5, 1.0], dtype=ml_dtypes.float8_e4m3fn)
    out = EVAL.lookup(Stack)(Stack(axis=1), ((f8, f8),), plain((2, 2)))
    assert out.dtype == ml_dtypes.float8_e4m3fn
    assert out.astype(np.float32).tolist() == [[0.5, 0.5], [1.0, 1.0]]
