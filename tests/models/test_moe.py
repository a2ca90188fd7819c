"""examples/moe.py (issue 29, "Done when"): a Mixtral-style MoE layer with expert parallelism,
written as its authors write it (router softmax, top-2, capacity dispatch with a cumsum and a
scatter-add, the experts split over `ep` walked by a loop over each device's own, the combine),
passes `check`, the simulator, compile and 8 XLA devices, equal to float64 numpy (f32 rel 1e-5),
and its only communication is the two all-to-alls the types call for."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from models import moe_reference as reference
from models.programs import (
    REPO,
    TIMEOUT_S,
    assert_close,
    assert_gradients_match_central_differences,
    on_devices,
    program,
    run_vjp_on_devices,
)
from tilefoundry import vjp
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.passes import compile as compile_pipeline
from tilefoundry.passes import verify

LAYER = f"{reference.EXAMPLE}:moe_layer"


@pytest.mark.slow
def test_check_accepts_the_example():
    done = subprocess.run(
        [sys.executable, "-m", "tilefoundry", "check", str(REPO / reference.EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok (1 function(s) typed and verified: moe_layer)" in done.stdout


def test_the_inputs_exercise_the_capacity():
    """Some choices are dropped (an expert's slots full), most kept: both paths are checked."""
    x, w_router, *_ = reference.inputs()
    c = reference.constants()
    kept = sum(len(group) for group in reference.routing(x, w_router))
    every = c["GROUPS"] * c["TOKENS"] * c["TOP_K"]
    assert every * 0.6 < kept < every


def test_each_device_walks_its_own_experts():
    names = {
        type(node.target).__name__
        for node in iter_nodes(program(LAYER).body)
        if isinstance(node, Call) and not hasattr(node.target, "body")
    }
    assert {"BlockedDynamicSlice", "BlockedDynamicUpdateSlice", "ScatterAdd"} <= names
    assert {"Cumulative", "TopK", "Gather"} <= names


@pytest.mark.parametrize("compiled", [False, True], ids=["simulated", "compiled"])
def test_the_layer_equals_numpy(compiled):
    fn = program(LAYER)
    fn = compile_pipeline(fn)[0] if compiled else fn
    arrays = reference.inputs()
    assert_close(evaluate(fn, *arrays), reference.layer(*arrays), "moe layer")


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_8_xla_devices_equal_numpy(devices8, compiled):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = reference.inputs()
    got = on_devices(devices8, LAYER, arrays, compiled)
    assert_close(got, reference.layer(*arrays), "moe layer on 8 XLA devices")


def test_the_experts_gradient_differentiates_through_the_expert_loop():
    """The expert loop reads w1, w3 and w2 from outside its body (it carries only
    `expert_out`): their gradients accumulate row by row in the backward loop (issue 25 item 4),
    each device walking its own experts, and equal the float64 reference's central differences.
    (The router's and the tokens' cotangents would also meet TopK, whose VJP the transform
    refuses: tests/autodiff/test_vjp_coverage.py.)"""
    fn = program(LAYER)
    arrays = reference.inputs()
    r = np.random.default_rng(29).standard_normal(fn.return_type.shape)
    gradient = vjp(fn, argnums=(2, 3, 4))
    verify(gradient)
    _, weights = evaluate(gradient, *arrays, r.astype(np.float32))
    assert_gradients_match_central_differences(
        weights, lambda *a: np.sum(reference.layer(*a) * r), arrays, (2, 3, 4), "moe experts"
    )


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_the_experts_gradient_on_8_xla_devices(devices8, compiled):
    """The same gradient through the SPMD exit: the backward expert loop is a while loop whose
    windows each device walks over its own experts."""
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = reference.inputs()
    r = np.random.default_rng(29).standard_normal(program(LAYER).return_type.shape)
    task = (LAYER, (2, 3, 4), (*arrays, r.astype(np.float32)), compiled)
    status, value = devices8.submit(run_vjp_on_devices, *task).result(timeout=TIMEOUT_S)
    assert status == "ok", value
    assert_gradients_match_central_differences(
        value[1], lambda *a: np.sum(reference.layer(*a) * r), arrays, (2, 3, 4), "moe experts"
    )


def test_the_only_collectives_are_the_two_all_to_alls():
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    from tilefoundry.exits.stablehlo.spmd import collective_report

    c = reference.constants()
    per_device = c["GROUPS"] * c["EXPERTS"] * c["CAPACITY"] * c["HIDDEN"] * 4 // 8
    got = [
        (e.kind, e.bytes_per_device, e.result_bytes_per_device)
        for e in collective_report(program(LAYER))
        for _ in range(e.count)
    ]
    assert got == [("all_to_all", per_device, per_device)] * 2


def test_the_result_stays_split_by_group():
    fn = program(LAYER)
    assert fn.return_type.layout.attrs == fn.params[0].type.layout.attrs
    assert np.shape(evaluate(fn, *reference.inputs())) == fn.params[0].type.shape
