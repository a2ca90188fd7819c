"""OptimizationBarrier: the identity on a tuple of tensors (StableHLO's optimization_barrier),
the op remat passes a recomputation's inputs through (docs/autodiff.md "Remat")."""

import re

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor import OptimizationBarrier
from tilefoundry.ir.types import TupleType, f32, i64, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import FUSION, FusionKind

XY = make_mesh((2, 4), ("x", "y"))
A = make_tensor_type((4, 8), f32)
IDX = make_tensor_type((4, 2), i64, "rmem")
PARTIAL = make_shard_tensor_type((16, 8), f32, mesh=XY, attrs=(S(0), P("sum")))
REPLICATED = make_shard_tensor_type((4,), f32, mesh=XY, attrs=(B, B))

# (id, operand, expected type | error regex)
CASES = [
    ("one field", TupleType((A,)), TupleType((A,))),
    ("dtypes and storages kept", TupleType((A, IDX)), TupleType((A, IDX))),
    # an identity computes nothing, so a pending sum is carried, never completed or refused
    ("Partial and Broadcast kept", TupleType((PARTIAL, REPLICATED)),
     TupleType((PARTIAL, REPLICATED))),
    ("empty tuple", TupleType(()), r"operand 'values' must be a non-empty tuple of tensors"),
    ("not a tuple", A, r"operand 'values' must be a non-empty tuple.*got f32\[4, 8\] gmem"),
    ("nested tuple", TupleType((A, TupleType((A,)))),
     r"operand 'values\[1\]' must be a tensor.*tuple_get_item"),
]  # fmt: skip


@pytest.mark.parametrize(("values", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES])
def test_typeinfer(values, expected):
    if isinstance(expected, str):
        pattern = re.compile(f"^OptimizationBarrier: {expected}", re.S)
        with pytest.raises(VerifyError, match=pattern):
            typeinfer_call(OptimizationBarrier(), values)
    else:
        assert typeinfer_call(OptimizationBarrier(), values) == expected


def test_a_tuple_operand_has_no_affine_relation_and_is_never_fused_across():
    assert relations_of(OptimizationBarrier(), (TupleType((A,)),)) is None
    assert FUSION.lookup(OptimizationBarrier)(OptimizationBarrier()) is FusionKind.BARRIER


@func
def barriered(x: Tensor[(4, 8), "f32"], w: Tensor[(8, 3), "f32"]):
    kept_x, kept_w = tf.optimization_barrier((x, w))
    return kept_x @ kept_w


X = np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)
W = np.random.default_rng(6).standard_normal((8, 3)).astype(np.float32)


def test_the_evaluator_runs_it_as_the_identity():
    np.testing.assert_array_equal(evaluate(barriered, X, W), X @ W)


def test_stablehlo_emits_one_barrier_over_both_operands():
    text = emit_stablehlo(barriered)
    (line,) = [ln for ln in text.splitlines() if "optimization_barrier" in ln]
    assert re.search(
        r'%\w+:2 = "stablehlo\.optimization_barrier"\(%\w+, %\w+\) : '
        r"\(tensor<4x8xf32>, tensor<8x3xf32>\) -> \(tensor<4x8xf32>, tensor<8x3xf32>\)",
        line,
    ), line


def test_xla_runs_it_as_the_identity():
    pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")
    from tilefoundry.exits.runtimes.xla import compiled_text, run_xla

    np.testing.assert_allclose(run_xla(barriered, X, W), X @ W, rtol=1e-6, atol=1e-6)
    assert "stablehlo.optimization_barrier" in compiled_text(barriered, X, W)
