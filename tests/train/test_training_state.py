"""Checkpoints of a training state (issue 26 item 6): what is saved is restored bit for bit, a
run resumed after k steps takes bit-identical steps to an uninterrupted one, a save killed
midway leaves the previous checkpoint intact, a file that is not a checkpoint is never
overwritten. The multi-process shards are checked by the 2-process run of
`device_step_checks` (tests/train/test_device_step.py)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tilefoundry import Tensor, func, grad, optim
from tilefoundry.cli.output import TEMP_PREFIX
from tilefoundry.dsl import tf
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.types import f32, i32, make_tensor_type
from tilefoundry.training_state import TrainingState, restore, save

HANG = Path(__file__).with_name("save_and_hang.py")
STEPS, STOP_AFTER = 6, 3


def test_a_saved_state_is_restored_bit_for_bit(tmp_path):
    rng = np.random.default_rng(5)
    rng.standard_normal(3)
    arrays = {
        "w": rng.standard_normal((4, 3)).astype(np.float32),
        "count": np.array([1, 2**40], np.int64),
        "half": rng.standard_normal(5).astype(ml_dtypes.bfloat16),
        "scalar": np.array(7, np.int32),
    }
    state = TrainingState(arrays, step=12, data_position=96, rng=rng.bit_generator.state)
    back = restore(save(tmp_path / "ckpt.npz", state))
    assert (back.step, back.data_position, back.rng) == (12, 96, rng.bit_generator.state)
    assert list(back.arrays) == list(arrays)
    for name, array in arrays.items():
        assert back.arrays[name].dtype == array.dtype, name
        assert back.arrays[name].tobytes() == array.tobytes(), name


def test_a_checkpoint_is_overwritten_but_nothing_else(tmp_path):
    path = tmp_path / "ckpt.npz"
    save(path, TrainingState({"w": np.zeros(3, np.float32)}, step=1))
    save(path, TrainingState({"w": np.ones(3, np.float32)}, step=2))
    assert restore(path).step == 2
    other = tmp_path / "notes.npz"
    np.savez(other, w=np.zeros(3))
    text = tmp_path / "notes.txt"
    text.write_text("mine")
    for victim in (other, text):
        before = victim.read_bytes()
        with pytest.raises(VerifyError, match="is not a tilefoundry checkpoint; refusing"):
            save(victim, TrainingState({"w": np.ones(3, np.float32)}, step=3))
        assert victim.read_bytes() == before
    with pytest.raises(EvalError, match="not a tilefoundry checkpoint"):
        restore(text)


@pytest.mark.slow
def test_a_save_killed_midway_leaves_the_previous_checkpoint(tmp_path):
    path, ready = tmp_path / "ckpt.npz", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, str(HANG), str(path), str(ready)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, f"the saving process exited with {child.returncode}"
            assert time.monotonic() < deadline, "the saving process never reached the save"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    # the killed save left its temporary file, complete but never renamed; the checkpoint is
    # the previous one, whole
    (leftover,) = [p for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert leftover.stat().st_size > 0
    back = restore(path)
    assert back.step == 1
    np.testing.assert_array_equal(back.arrays["w"], np.arange(1 << 16, dtype=np.float32))


# -- resume after k steps == uninterrupted ---------------------------------------------------

BATCH, MODEL = 8, 4
PARAMS = (make_tensor_type((MODEL, MODEL), f32), make_tensor_type((MODEL,), f32))
ADAMW = optim.adamw(PARAMS, learning_rate=0.05)


@func
def loss(
    x: Tensor[(BATCH, MODEL), "f32"], w: Tensor[(MODEL, MODEL), "f32"], b: Tensor[(MODEL,), "f32"]
):
    error = tf.tanh(x @ w + b) - x
    return tf.reduce(error * error, axes=(0, 1), keepdim=False, kind="mean")


gradients = grad(loss, argnums=(1, 2))


@func
def train_step(
    x: Tensor[(BATCH, MODEL), "f32"],
    w: Tensor[(MODEL, MODEL), "f32"],
    b: Tensor[(MODEL,), "f32"],
    mu_w: Tensor[(MODEL, MODEL), "f32"],
    mu_b: Tensor[(MODEL,), "f32"],
    nu_w: Tensor[(MODEL, MODEL), "f32"],
    nu_b: Tensor[(MODEL,), "f32"],
    step: Tensor[(), "i32"],
):
    g_w, g_b = gradients(x, w, b)
    return ADAMW.update(w, b, g_w, g_b, mu_w, mu_b, nu_w, nu_b, step)


NAMES = ("w", "b", "mu_w", "mu_b", "nu_w", "nu_b")


def _train(state: TrainingState, until: int) -> TrainingState:
    """Steps state.step+1 .. until on one XLA device, the state resident and donated; each
    step's batch drawn from the data RNG, whose state the checkpoint carries."""
    import jax

    from tilefoundry import jit
    from tilefoundry.exits.runtimes.device_step import fetch

    rng = np.random.default_rng()
    rng.bit_generator.state = state.rng
    step = jit(train_step, donate_argnums=tuple(range(1, 7)))
    arrays = step.place(np.zeros((BATCH, MODEL), np.float32), *state.arrays.values(), np.int32(1))
    current = arrays[1:7]
    for count in range(state.step + 1, until + 1):
        x = rng.standard_normal((BATCH, MODEL)).astype(np.float32)
        current = step(jax.device_put(x), *current, np.array(count, np.int32))
    arrays = dict(zip(NAMES, fetch(tuple(current)), strict=True))
    return TrainingState(arrays, until, until * BATCH, rng.bit_generator.state)


def test_resuming_after_k_steps_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    pytest.importorskip("jax", reason="the device-resident step needs jax[lib]")
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((MODEL, MODEL)) / 2).astype(np.float32)
    b = np.zeros(MODEL, np.float32)
    start = TrainingState(
        dict(zip(NAMES, (w, b, *ADAMW.init()), strict=True)), 0, 0, rng.bit_generator.state
    )
    uninterrupted = _train(start, STEPS)
    path = save(tmp_path / "ckpt.npz", _train(start, STOP_AFTER))
    resumed = _train(restore(path), STEPS)
    assert (resumed.step, resumed.data_position, resumed.rng) == (
        uninterrupted.step, uninterrupted.data_position, uninterrupted.rng,
    )  # fmt: skip
    for name in NAMES:
        assert resumed.arrays[name].tobytes() == uninterrupted.arrays[name].tobytes(), name
    assert not np.array_equal(uninterrupted.arrays["w"], w)  # it trained
