"""HF-style GQA with more tensor-parallel devices than KV heads (issue 29): the query branch of
RoPE split over `tp`, the key branch plain. The simulator runs the plain branch on the caller's
mesh (it once died on it with a bare IndexError, exit status 2), and the program equals float64
numpy on the simulator, after compile, and on 8 XLA devices (f32 rel 1e-5)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models import gqa
from models.programs import assert_close, on_devices
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir.nn import RoPE
from tilefoundry.passes import compile as compile_pipeline

NAME = "models.gqa:gqa_attention"


def test_the_key_branch_is_plain_and_the_query_branch_split():
    rope = next(
        node
        for node in iter_nodes(gqa.gqa_attention.body)
        if isinstance(node, Call) and isinstance(node.target, RoPE)
    )
    query, key = rope.type.fields
    assert query.layout is not None and key.layout is None


def test_simulator_equals_numpy():
    arrays = gqa.inputs()
    assert_close(evaluate(gqa.gqa_attention, *arrays), gqa.reference(*arrays), "simulated")


def test_fused_program_equals_numpy():
    arrays = gqa.inputs()
    fused = compile_pipeline(gqa.gqa_attention)[0]
    assert_close(evaluate(fused, *arrays), gqa.reference(*arrays), "fused")


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_8_xla_devices_equal_numpy(devices8, compiled):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = gqa.inputs()
    got = on_devices(devices8, NAME, arrays, compiled)
    assert_close(got, gqa.reference(*arrays), "8 XLA devices")


@pytest.mark.slow
def test_tilefoundry_run_agrees_with_the_oracle():
    done = subprocess.run(
        [sys.executable, "-m", "tilefoundry", "run", gqa.__file__, "--func", "gqa_attention"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agrees, max |diff|" in done.stdout
