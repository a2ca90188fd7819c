"""`tilefoundry.jit`: a compiled step whose state stays on the devices (issue 26 item 1).

The truth is the float64 numpy SGD step (`accumulation_programs.numpy_step`) taken the same
number of times; "never copies parameters to the host" is asserted by running every step inside
`jax.transfer_guard("disallow")` (a host transfer raises there), and donation by the donated
inputs being deleted and the new weights living in the old weights' device buffers.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")

import jax

import tilefoundry
from tilefoundry.errors import EvalError
from tilefoundry.exits.runtimes.device_step import fetch
from tilefoundry.exits.runtimes.distributed import launch_local
from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.frontend import parse_source
from train import accumulation_programs as programs
from train import device_step_checks

TIMEOUT_S = 600
SOURCE = """
from tilefoundry.frontend import Tensor, func


@func
def sgd(w: Tensor[(4, 3), "f32"], g: Tensor[(4, 3), "f32"], n: Tensor[(2,), "i64"]):
    return w - g * 0.5, n + 1
"""


def _sgd():
    return parse_source(SOURCE, "<device_step>")["sgd"]


def _numpy_steps(count: int) -> tuple[np.ndarray, np.ndarray]:
    x, y, w1, w2 = programs.inputs()
    for _ in range(count):
        w1, w2 = (w.astype(np.float32) for w in programs.numpy_step(x, y, w1, w2))
    return w1, w2


def test_one_device_step_keeps_its_state_on_the_device_and_reuses_donated_buffers():
    step = tilefoundry.jit(_sgd(), donate_argnums=(0, 2))
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = np.ones((4, 3), np.float32)
    n = np.array([7, 2**40], np.int64)
    w_dev, g_dev, n_dev = step.place(w, g, n)
    pointers = []
    with jax.transfer_guard("disallow"):
        for _ in range(4):
            old = w_dev, n_dev
            w_dev, n_dev = step(w_dev, g_dev, n_dev)
            assert all(a.is_deleted() for a in old) and not g_dev.is_deleted()
            pointers.append((w_dev.unsafe_buffer_pointer(), n_dev.unsafe_buffer_pointer()))
    # from the first step's results on, each step writes into the buffers it was given (a placed
    # array may still borrow its numpy array's memory, which XLA copies out of once)
    assert pointers[1:] == pointers[:1] * 3
    np.testing.assert_array_equal(fetch(w_dev), w - 2)
    np.testing.assert_array_equal(fetch(n_dev), n + 4)  # i64 kept (x64 around the call)


def test_one_device_step_equals_run_xla_on_numpy_arguments():
    fn = _sgd()
    arrays = (np.full((4, 3), 2, np.float32), np.ones((4, 3), np.float32), np.arange(2))
    got = tilefoundry.jit(fn)(*arrays)
    for g, want in zip(got, run_xla(fn, *arrays), strict=True):
        np.testing.assert_array_equal(fetch(g), want)


def test_a_wrong_argument_is_refused_before_compiling_naming_the_parameter():
    step = tilefoundry.jit(_sgd())
    with pytest.raises(EvalError, match=r"parameter .g. is f32 \(float32\), got an array of"):
        step(np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float64), np.arange(2))
    with pytest.raises(EvalError, match="expected 3 argument\\(s\\) \\(w, g, n\\), got 2"):
        step(np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(EvalError, match="donate_argnums names argument 3, but sgd takes 3"):
        tilefoundry.jit(_sgd(), donate_argnums=(3,))


@pytest.mark.slow
def test_eight_device_steps_stay_resident_donate_and_equal_numpy(devices8):
    found = devices8.submit(device_step_checks.resident_steps).result(timeout=TIMEOUT_S)
    assert found["donated"] == found["reused"] == [True] * device_step_checks.STEPS
    # x, y split on their batch axis over dp; the weights replicated, in and out
    assert found["placed"] == ["P(None, 'dp', None)"] * 2 + ["P(None, None)"] * 2
    assert found["returned"] == ["P(None, None)"] * 2
    for got, want in zip(found["weights"], _numpy_steps(device_step_checks.STEPS), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_step_runs_resident_and_checkpoints_on_two_processes_of_four_devices(tmp_path):
    script = str(Path(device_step_checks.__file__))
    launch_local(
        [sys.executable, script, str(tmp_path)],
        2,
        devices_per_process=4,
        timeout_s=TIMEOUT_S,
        env=dict(os.environ),
        log_dir=tmp_path / "logs",
    )
    found = np.load(tmp_path / "steps.npz")
    assert found["flags"].all()
    for name, want in zip(("w1", "w2"), _numpy_steps(device_step_checks.STEPS), strict=True):
        np.testing.assert_allclose(found[name], want, rtol=1e-5, atol=1e-6)
    # the checkpoint: one file per process, each with the rows of x its 4 devices hold
    half = programs.BATCH // 2
    for process in range(2):
        data = np.load(tmp_path / f"ckpt.npz.process{process}-of-2")
        (x,) = [a for a in json.loads(str(data["__checkpoint__"]))["arrays"] if a["name"] == "x"]
        rows = sorted(tuple(block["index"][1]) for block in x["blocks"])
        want = [(process * half + i * 2, process * half + i * 2 + 2) for i in range(4)]
        assert rows == want, process
