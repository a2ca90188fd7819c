"""legalize makes every implicit broadcast explicit (DESIGN §4.10: "legalize then rewrites every
implicit broadcast into an explicit `BroadcastTo` ... so the strict verifier and everything after
it see none"). Issue 20: every broadcast in the tests used to differ in rank, so a legalize that
missed a same-rank broadcast (`f32[4,8] + f32[1,8]`) went unnoticed; both kinds are here, and
results are compared with numpy's broadcasting."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from passes.builders import binary, function
from tilefoundry.errors import InternalCompilerError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.hir.tensor import BroadcastTo
from tilefoundry.ir.types import TensorType, f32
from tilefoundry.passes import compile, legalize, verify

CASES = [
    # (lhs shape, rhs shape): which operand needs a broadcast to (4, 8)
    ((4, 8), (1, 8)),  # same rank, a size-1 axis
    ((4, 1), (4, 8)),  # same rank, on the left operand
    ((4, 8), (8,)),  # lower rank
    ((1, 8), (4, 1)),  # both operands
]


@pytest.mark.parametrize(("lhs", "rhs"), CASES, ids=[f"{a}+{b}" for a, b in CASES])
def test_every_implicit_broadcast_becomes_an_explicit_broadcast_to(lhs, rhs):
    x, y = Var("x", TensorType(lhs, f32)), Var("y", TensorType(rhs, f32))
    fn = function("f", (x, y), binary("add", x, y))
    out = legalize(fn)
    verify(out, tier="tensor")  # the strict tier accepts no implicit broadcast
    add = out.body
    assert isinstance(add, Call) and add.type.shape == (4, 8)
    for arg, shape in zip(add.args, (lhs, rhs), strict=True):
        if shape == (4, 8):
            assert isinstance(arg, Var)
        else:
            assert isinstance(arg.target, BroadcastTo) and arg.type.shape == (4, 8)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(lhs).astype(np.float32)
    b = rng.standard_normal(rhs).astype(np.float32)
    np.testing.assert_array_equal(evaluate(out, a, b), a + b)


def test_the_verifier_catches_a_legalize_that_misses_same_rank_broadcasts(monkeypatch):
    """The planted bug of issue 20: legalize's broadcast detection skips same-rank operands.
    The verifier must not share that code, so compile reports the broken IR."""
    legalize_module = importlib.import_module("tilefoundry.passes.legalize")
    verify_module = importlib.import_module("tilefoundry.passes.verify")

    real = legalize_module.implicitly_broadcast

    def misses_same_rank(call):
        return tuple(i for i in real(call) if len(call.args[i].type.shape) != len(call.type.shape))

    # wherever the buggy function is used, it is the buggy one
    monkeypatch.setattr(legalize_module, "implicitly_broadcast", misses_same_rank)
    monkeypatch.setattr(verify_module, "implicitly_broadcast", misses_same_rank, raising=False)
    x, y = Var("x", TensorType((4, 8), f32)), Var("y", TensorType((1, 8), f32))
    with pytest.raises(InternalCompilerError, match="implicit broadcast of operand 1"):
        compile(function("f", (x, y), binary("add", x, y)))
