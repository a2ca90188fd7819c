"""The README's main job must keep working: `python -m tilefoundry demo` exits 0 and prints the
seed §7.5 figures (shard-layout §7.5: local shape (1,1,3,1,4), strides (0,0,4,0,1) and
(1536,384,128,4,1)), which the demo computes with the library. It runs the Llama TP layer
(issue 15), the gradient of a Megatron MLP loss (issue 25) and three AdamW steps of the training
example (issue 26) on 8 simulated devices and, with jax, on 8 XLA devices: each step either
agrees with float64 numpy (the training losses: with the simulation) or says which refusal stops
it; nothing it prints disagrees."""

import importlib.util
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess


def test_demo_runs_and_prints_the_seed_example():
    done = subprocess.run(
        [sys.executable, "-m", "tilefoundry", "demo"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "local shape          (1, 1, 3, 1, 4)" in done.stdout
    assert "per-instance strides (0, 0, 4, 0, 1)" in done.stdout
    assert "shared strides       (1536, 384, 128, 4, 1)" in done.stdout
    assert "Traceback" not in done.stderr
    assert "a Llama decoder layer, tensor parallel on 8 simulated devices" in done.stdout
    assert "gradients: value_and_grad on 8 simulated devices" in done.stdout
    assert "loss and gradients, simulated: max |diff|" in done.stdout
    assert "training: 3 AdamW steps of a 2-layer Llama on 2 x 4 simulated devices" in done.stdout
    assert "losses, simulated: " in done.stdout
    if importlib.util.find_spec("jax") is not None:
        assert "Llama TP layer on 8 XLA devices: " in done.stdout
        assert "Megatron MLP loss and gradients on 8 XLA devices: " in done.stdout
        assert "training losses on 8 XLA devices (state resident, donated): " in done.stdout
    assert "DISAGREES" not in done.stdout
