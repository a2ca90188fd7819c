"""Reverse: StableHLO's reverse / numpy's flip, its typing and sharding rules, and the kernel."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor import Reverse
from tilefoundry.ir.types import DimVar, f32, i8, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 2), ("x", "y"))
N = DimVar("N", 1, 64)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


# (id, op, operand, expected type | error regex)
CASES = [
    ("one axis", Reverse(axes=(1,)), plain((4, 8)), plain((4, 8))),
    ("every axis", Reverse(axes=(0, -1)), plain((4, 8), i8, "smem"), plain((4, 8), i8, "smem")),
    ("no axis", Reverse(axes=()), plain((4,)), plain((4,))),
    ("symbolic", Reverse(axes=(0,)), plain((N, 3)), plain((N, 3))),
    ("axis range", Reverse(axes=(2,)), plain((4, 8)), r"axes entry 2 is out of range for rank 2"),
    ("twice", Reverse(axes=(1, -1)), plain((4, 8)), r"names an axis twice"),
    # a Split carries on an axis left in order and fails closed on a reversed one
    ("Split kept", Reverse(axes=(1,)), sharded((8, 4), X, S(0)), sharded((8, 4), X, S(0))),
    ("Split reversed", Reverse(axes=(0,)), sharded((8, 4), X, S(0)),
     r"'x' is Split on mesh axis 0 \('x'\) along axis 0, and reversing a split axis moves "
     r"every block to the mirrored device; insert reshard\(x"),
    # every pending reduction commutes with a permutation of elements
    ("Partials carry", Reverse(axes=(0,)), sharded((4, 4), XY, P("max"), P("sum")),
     sharded((4, 4), XY, P("max"), P("sum"))),
]  # fmt: skip


@pytest.mark.parametrize(("op", "x", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(op, x, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 2), (-1, 0, 1), ()])
def test_kernel_is_numpys_flip(axes):
    x = np.arange(24).reshape(2, 3, 4)
    got = EVAL.lookup(Reverse)(Reverse(axes=axes), (x,), plain(x.shape))
    np.testing.assert_array_equal(got, np.flip(x, axes))
