"""examples/gpt2.py (issue 29, "Done when"): a GPT-2 style block with a vocab-parallel embedding
and the Megatron vocab-parallel cross-entropy (a batched target-logit gather over the vocabulary
split on `tp`) passes `check`, the simulator, compile and 8 XLA devices, equal to float64 numpy
(f32 rel 1e-5), and communicates what Megatron does: one all-reduce of the embedding, one per
row-parallel projection, and three of one number per token for the loss."""

from __future__ import annotations

import subprocess
import sys

import pytest

from models import gpt2_reference as reference
from models.programs import (
    REPO,
    assert_close,
    assert_gradients_match_central_differences,
    on_devices,
    program,
)
from tilefoundry import grad
from tilefoundry.evaluator import evaluate
from tilefoundry.passes import compile as compile_pipeline
from tilefoundry.passes import verify

LOSS = f"{reference.EXAMPLE}:gpt2_loss"
TILEFOUNDRY = (sys.executable, "-m", "tilefoundry")


def loss_inputs():
    return reference.inputs(program(LOSS))


@pytest.mark.slow
def test_check_accepts_the_example():
    done = subprocess.run(
        [*TILEFOUNDRY, "check", str(REPO / reference.EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok (3 function(s) typed and verified: heads, gpt2_loss, gpt2_batch)" in done.stdout


@pytest.mark.slow
def test_the_loss_is_a_scalar_and_the_logits_stay_split():
    fn = program(LOSS)
    verify(fn)
    assert fn.return_type.shape == ()
    shown = subprocess.run(
        [*TILEFOUNDRY, "show", str(REPO / reference.EXAMPLE), "--func", "gpt2_loss"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    logits_line = next(line for line in shown.splitlines() if line.lstrip().startswith("%logits"))
    assert "f32[16, 256]" in logits_line and "tp" in logits_line


@pytest.mark.parametrize("compiled", [False, True], ids=["simulated", "compiled"])
def test_the_loss_equals_numpy(compiled):
    fn = program(LOSS)
    fn = compile_pipeline(fn)[0] if compiled else fn
    arrays = loss_inputs()
    assert_close(evaluate(fn, *arrays), reference.loss(*arrays), "gpt2 loss")


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_8_xla_devices_equal_numpy(devices8, compiled):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = loss_inputs()
    got = on_devices(devices8, LOSS, arrays, compiled)
    assert_close(got, reference.loss(*arrays), "gpt2 loss on 8 XLA devices")


def test_the_batch_entry_is_the_loss_on_the_fixed_batch():
    batch = program(f"{reference.EXAMPLE}:gpt2_batch")
    weights = reference.weights(batch)
    got = evaluate(batch, *weights)
    assert_close(got, reference.loss(*loss_inputs()), "gpt2_batch")


@pytest.mark.parametrize("compiled", [False, True], ids=["simulated", "compiled"])
def test_the_gradients_on_the_mesh_equal_central_differences_of_numpy(compiled):
    """Training the example: the VJPs of the vocab-parallel embedding, the tied logits and the
    batched target-logit gather over the split vocabulary run on the simulated mesh, and every
    weight's gradient matches the float64 reference loss's central difference."""
    fn = program(LOSS)
    weights = tuple(range(2, len(fn.params)))
    gradient_fn = grad(fn, argnums=weights)
    gradient_fn = compile_pipeline(gradient_fn)[0] if compiled else gradient_fn
    arrays = loss_inputs()
    gradients = evaluate(gradient_fn, *arrays)
    assert [g.shape for g in gradients] == [arrays[i].shape for i in weights]
    assert_gradients_match_central_differences(
        gradients, reference.loss, arrays, weights, "gpt2 loss"
    )


TOKEN_ACTIVATION = 2 * 8 * 64 * 4
"""One (batch, seq, dim) f32 activation: what each all-reduce of the residual stream moves."""


def test_collectives_are_megatrons():
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    from tilefoundry.exits.stablehlo.spmd import collective_report

    got = sorted(
        (e.kind, e.reduction, e.source, e.bytes_per_device)
        for e in collective_report(program(LOSS))
        for _ in range(e.count)
    )
    one_per_token = 16 * 4
    assert got == sorted(
        [("all_reduce", "sum", "Reshard", TOKEN_ACTIVATION)] * 3  # embedding, attention, MLP
        + [
            ("all_reduce", "max", "Reduce", one_per_token),  # the row max
            ("all_reduce", "sum", "Reduce", one_per_token),  # the sum of exponentials
            ("all_reduce", "sum", "Reshard", one_per_token),  # the target logit
        ]
    )
