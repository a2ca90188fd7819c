"""A loop window on a device mesh runs per device when its axis is unsplit (DESIGN §4.14).

semantic-analysis §3.2 refuses the split windowed axis (tests/ir/hir/tensor/test_dynamic_slice.py);
here the accepted cases run on 8 XLA devices and must equal the unsharded numpy meaning.
"""

import numpy as np

from exits.spmd import window_programs
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import emit_spmd

RNG = np.random.default_rng(14)


def test_split_rows_window_on_unsplit_columns(devices8):
    x = RNG.standard_normal((16, 16)).astype(np.float32)
    expected = np.exp(x[:, 6:10])
    got = devices8.submit(window_programs.run, "rows_window", (x,), 8).result()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(evaluate(window_programs.rows_window, x), expected, rtol=1e-6)
    assert '"stablehlo.dynamic_slice"' in emit_spmd(window_programs.rows_window)


def test_replicated_window_is_cut_to_each_devices_rows(devices8):
    """DESIGN §4.12: a replicated input is read through its access map restricted to the block
    (rows cut locally along the projection; the windowed columns held whole)."""
    x = RNG.standard_normal((16, 16)).astype(np.float32)
    y = RNG.standard_normal((16, 4)).astype(np.float32)
    expected = x[:, 3:7] + y
    got = devices8.submit(window_programs.run, "replicated_window", (x, y), 8).result()
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(
        evaluate(window_programs.replicated_window, x, y), expected, rtol=1e-6
    )


def test_each_device_walks_its_own_experts(devices8):
    """issue 29: `for e in range(E_LOCAL)` over experts split on `ep` reads and writes each
    device's e-th expert, on the devices as in the simulation, with no collective."""
    from tilefoundry.exits.stablehlo.spmd import collective_report

    x = RNG.standard_normal((16, 4, 8)).astype(np.float32)
    w = (RNG.standard_normal((16, 8, 8)) / np.sqrt(8)).astype(np.float32)
    h = x @ w
    expected = h / (1.0 + np.exp(-h))
    got = devices8.submit(window_programs.run, "local_experts", (x, w), 8).result()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    simulated = evaluate(window_programs.local_experts, x, w)
    np.testing.assert_allclose(simulated, expected, rtol=1e-5, atol=1e-6)
    assert collective_report(window_programs.local_experts) == []
