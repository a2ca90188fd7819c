"""Fusion snapshots (SFEP-0053 §8): each program printed before and after `compile`, with the
fusion report, compared with tests/golden/passes/<name>.txt; plus the structural facts each golden
is meant to show, asserted directly so a refreshed golden cannot silently change them."""

from __future__ import annotations

import numpy as np
import pytest

from passes import fusion_programs as programs
from tilefoundry.evaluator import evaluate
from tilefoundry.inspect import format_ir
from tilefoundry.passes import compile

RNG = np.random.default_rng(0)


def _snapshot(fn) -> str:
    compiled, report = compile(fn)
    return f"# before\n{format_ir(fn)}# after compile\n{format_ir(compiled)}# report\n{report}\n"


@pytest.mark.parametrize("fn", programs.CASES, ids=lambda f: f.name)
def test_golden(fn, golden):
    golden(f"passes/{fn.name}.txt", _snapshot(fn))


def _kinds(fn) -> list[tuple[str, tuple[str, ...]]]:
    return [(r.kind, r.ops) for r in compile(fn)[1].regions]


def test_elementwise_chain_is_one_region():
    assert _kinds(programs.elementwise_chain) == [("loop", ("mul", "add", "exp", "sub"))]


def test_producer_with_second_consumer_is_not_fused():
    regions = _kinds(programs.second_consumer)
    assert all("exp" not in ops for _, ops in regions)


def test_elementwise_into_reduction_is_rooted_at_it():
    [(kind, ops)] = _kinds(programs.elementwise_into_reduction)
    assert kind == "reduction" and ops[-1] == "reduce" and "broadcast_to" in ops


def test_elementwise_into_matmul_operand():
    [(kind, ops)] = _kinds(programs.elementwise_into_matmul)
    assert kind == "contraction" and ops[-1] == "matmul" and "tanh" in ops


def test_roots_never_fuse_together():
    for fn in (programs.reduction_into_reduction, programs.matmul_into_reduction):
        for kind, ops in _kinds(fn):
            assert sum(op in ("reduce", "matmul") for op in ops) <= 1, (kind, ops)


def test_reshard_is_a_barrier():
    assert all("reshard" not in ops for _, ops in _kinds(programs.reshard_barrier))


def test_transpose_into_reduction_is_a_barrier_but_into_elementwise_or_matmul_fuses():
    """fusion_rules: a transpose is view-like for elementwise, view and contraction readers (an
    index map, a contraction's operand prologue), not for a reduction (it reorders its walk)."""
    assert all("reduce" not in ops or "transpose" not in ops
               for _, ops in _kinds(programs.transpose_not_view_like))  # fmt: skip
    assert all("reduce" not in ops or "transpose" not in ops
               for _, ops in _kinds(programs.transpose_reshape_into_reduction))  # fmt: skip
    [(_, ops)] = _kinds(programs.transpose_view_like)
    assert ops[0] == "transpose"
    assert _kinds(programs.transpose_into_matmul) == [
        ("contraction", ("exp", "transpose", "matmul"))
    ]


def test_elementwise_epilogue_joins_its_root():
    """Issue 19 / DESIGN §6: elementwise consumers of a root's result join the root's region (one
    root per region still), so the root's result is never written out."""
    assert _kinds(programs.matmul_epilogue) == [("contraction", ("matmul", "add", "relu"))]
    [(kind, ops)] = _kinds(programs.reduction_epilogue)
    assert kind == "reduction" and ops[0] == "exp" and ops[-1] == "div" and "reduce" in ops
    x = RNG.standard_normal((8, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 4)).astype(np.float32)
    r = RNG.standard_normal((8, 4)).astype(np.float32)
    fused = compile(programs.matmul_epilogue)[0]
    np.testing.assert_allclose(evaluate(fused, x, w, r), np.maximum(r + x @ w, 0), rtol=1e-5)


def test_parameter_producer_becomes_a_region_input():
    compiled, _ = compile(programs.parameter_producer)
    region = compiled.body.target
    assert (
        compiled.body.args == (compiled.params[0],) and region.inputs[0] is not compiled.params[0]
    )


@pytest.mark.parametrize("fn", programs.CASES, ids=lambda f: f.name)
def test_fused_program_computes_the_same(fn):
    args = [RNG.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    want, got = evaluate(fn, *args), evaluate(compile(fn)[0], *args)
    want, got = (v if isinstance(v, tuple) else (v,) for v in (want, got))
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_loop_body_fuses_inside_and_only_inside():
    """DESIGN §6: elementwise work and its reduction fuse inside the loop body (the window read
    joins as a view), and so does the carry's add, the reduction's epilogue; the loop-invariant
    `exp(bias) * 2` (and its broadcast to the tile) is computed once before the loop, so it is
    fused there, in the enclosing block."""
    assert _kinds(programs.loop_body) == [
        ("loop", ("exp", "broadcast_to", "mul", "broadcast_to")),
        ("reduction", ("dynamic_slice", "sub", "exp", "mul", "reduce", "add")),
    ]
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    bias = RNG.standard_normal((8, 1)).astype(np.float32)
    expected = (np.exp(x - np.exp(bias) * 2.0) * 0.5).sum(axis=1, keepdims=True)
    fused = compile(programs.loop_body)[0]
    np.testing.assert_allclose(evaluate(fused, x, bias), expected, rtol=1e-5)
