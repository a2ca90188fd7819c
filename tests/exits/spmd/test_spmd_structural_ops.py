"""The structural ops on 8 XLA devices (the worker of conftest.py), against independent float64
numpy oracles and the mesh simulation, and the collectives each program emits.

DESIGN §4.12: "Communication happens only where the IR says so": a scatter into a split table or
along carried axes moves no data, and the MoE combine (index positions split over `ep`, so the
result is Partial(sum)) costs exactly the one all-reduce of the Reshard completing it.
"""

import numpy as np
import pytest

from exits.spmd import structural_programs
from exits.spmd.structural_programs import PROGRAMS
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import collective_report

pytest.importorskip("jax", reason="the SPMD exit tests need jax[lib]")

TIMEOUT_S = 300


def _close(got, want, what: str) -> None:
    got = np.asarray(got)
    assert got.shape == np.shape(want), what
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-5, atol=1e-5, err_msg=what)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_runs_on_devices_like_numpy_and_the_simulation(name, devices8):
    arrays = structural_programs.inputs(name)
    got = devices8.submit(structural_programs.run, name, arrays).result(timeout=TIMEOUT_S)
    _close(got, PROGRAMS[name].oracle(*arrays), f"{name} vs numpy")
    _close(evaluate(PROGRAMS[name].fn, *arrays), PROGRAMS[name].oracle(*arrays), f"{name} sim")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_communicates_only_what_the_ir_asks(name):
    kinds = tuple(entry.kind for entry in collective_report(PROGRAMS[name].fn))
    assert kinds == PROGRAMS[name].collectives
