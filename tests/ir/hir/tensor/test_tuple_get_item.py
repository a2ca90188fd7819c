"""TupleGetItem: projection of a TupleType field (types §5), Python indexing."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
from tilefoundry.ir.types import TupleType, f32, i64, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import EVAL

XY = make_mesh((2, 4), ("x", "y"))
A = make_tensor_type((4, 8), f32)
IDX = make_tensor_type((4, 2), i64, "rmem")
PARTIAL = make_shard_tensor_type((16, 8), f32, mesh=XY, attrs=(S(0), P("sum")))
PAIR = TupleType((A, IDX))

# (id, index, operand, expected type | error regex)
CASES = [
    ("first", 0, PAIR, A),
    ("second", 1, PAIR, IDX),
    ("negative", -1, PAIR, IDX),
    ("negative first", -2, PAIR, A),
    ("nested field is a tuple", 1, TupleType((A, PAIR)), PAIR),
    # hir §1.1: a Partial in a tuple field is carried, never completed or rejected
    ("Partial field kept", 0, TupleType((PARTIAL,)), PARTIAL),
    ("Broadcast field kept", 0, TupleType((make_shard_tensor_type(
        (4,), f32, mesh=XY, attrs=(B, B)),)), make_shard_tensor_type((4,), f32, mesh=XY,
                                                                     attrs=(B, B))),
    ("out of range", 2, PAIR, r"TupleGetItem: index 2 is out of range for a tuple of 2 field"),
    ("negative out of range", -3, PAIR, r"index -3 is out of range.*valid: -2\.\.1"),
    ("empty tuple", 0, TupleType(()), r"tuple of 0 field"),
    ("not a tuple", 0, A, r"operand 'value' must be a tuple, got f32\[4, 8\]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("index", "value", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(index, value, expected):
    op = TupleGetItem(index=index)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, value)
    else:
        assert typeinfer_call(op, value) == expected


def test_index_must_be_an_int():
    with pytest.raises(VerifyError, match="attribute 'index' must be int"):
        TupleGetItem(index="0")


def test_projection_has_no_affine_relation():
    assert relations_of(TupleGetItem(index=0), (PAIR,)) is None


def test_kernel_returns_the_element():
    first, second = np.ones((2, 2)), np.arange(3)
    kernel = EVAL.lookup(TupleGetItem)
    assert kernel(TupleGetItem(index=1), ((first, second),), IDX) is second
    assert kernel(TupleGetItem(index=-2), ((first, second),), A) is first
