"""examples/train_llama.py (issue 26 item 7): a 2-layer Llama trained with AdamW on a 2 x 4
(dp, tp) mesh.

"Done when": the loss falls below LOSS_THRESHOLD within STEP_BUDGET steps on 8 CPU devices, and
the first 20 steps equal a JAX + optax reference (the same model in jax.numpy, same initial
parameters, same batches, optax.adamw, jax.jit with the same NamedShardings).

The tolerance, per step: losses within rtol 1e-5 and parameters within atol 5e-5 (rtol 1e-4).
Both runs are float32 programs of the same math that differ only in the order of their additions
(how XLA blocks each matmul, how our collectives vs XLA's partitioner sum across devices,
fused vs separate exp/log), so each step's loss differs by a few ulps (float32 eps 1.2e-7;
measured: at most 1.5e-7 relative over 20 steps); AdamW's step moves each parameter by at most
about the learning rate (3e-3) times its normalised update, so a relative gradient difference of
ulps moves the parameters apart by about 1e-6 per step at most (measured: at most 5e-6 after 20
steps). The bounds leave a 10x margin over what was measured and stay 1000x below what a real
difference (a wrong gradient, a wrong bias correction) moves.
"""

import numpy as np
import pytest

from train import train_llama_checks as checks

TIMEOUT_S = 900
COMPARED_STEPS = 20


def test_the_step_type_checks_with_every_state_of_its_parameters_type():
    model = checks.example()
    params = model.train_step.params
    assert len(params) == 2 + 3 * len(model.NAMES) + 1
    kinds = [p.type for p in params[2 : 2 + len(model.NAMES)]]
    for state in range(2):
        start = 2 + len(model.NAMES) * (1 + state)
        assert [p.type for p in params[start : start + len(model.NAMES)]] == kinds


def test_the_reference_evaluator_runs_steps_of_the_same_program_and_the_loss_falls():
    model = checks.example()
    _, losses = model.train(model.start(), 3, backend="reference")
    assert losses[0] > losses[-1]
    # the first loss is about ln(VOCAB): the initial model's prediction is nearly uniform
    assert abs(losses[0] - np.log(model.VOCAB)) < 1.0


@pytest.fixture(scope="module")
def runs(devices8):
    pytest.importorskip("optax", reason="the JAX reference optimizer is optax (test extra)")
    model = checks.example()
    ours = devices8.submit(checks.ours, model.STEP_BUDGET, COMPARED_STEPS).result(TIMEOUT_S)
    theirs = devices8.submit(checks.jax_reference, COMPARED_STEPS).result(timeout=TIMEOUT_S)
    return model, ours, theirs


@pytest.mark.slow
def test_it_trains_below_the_threshold_within_its_step_budget(runs):
    model, (losses, _), _ = runs
    assert len(losses) == model.STEP_BUDGET
    assert min(losses[-10:]) < model.LOSS_THRESHOLD < losses[0]


@pytest.mark.slow
def test_the_first_20_steps_equal_jax_and_optax(runs):
    model, (losses, params), (jax_losses, jax_params) = runs
    np.testing.assert_allclose(losses[:COMPARED_STEPS], jax_losses, rtol=1e-5)
    assert sorted(jax_params) == sorted(model.NAMES)
    for name in model.NAMES:
        np.testing.assert_allclose(params[name], jax_params[name], rtol=1e-4, atol=5e-5)
