"""A bf16 TP MLP whose widened partial is all-reduced in f32 (issue 29): the cast keeps the
pending sum, the one all-reduce is in f32, and the result equals float64 numpy within bf16's
rel 2e-2 on the simulator, after compile and on 8 XLA devices."""

from __future__ import annotations

import pytest

from models import bf16_mlp
from models.programs import assert_close, on_devices
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types import f32
from tilefoundry.ir.types.shard import Partial
from tilefoundry.passes import compile as compile_pipeline

NAME = "models.bf16_mlp:bf16_mlp"
BF16_RTOL = 2e-2


def test_the_widened_partial_is_still_pending():
    reshard = bf16_mlp.bf16_mlp.body
    (widened,) = reshard.args
    assert widened.type.dtype == f32 and widened.type.layout.attrs == (Partial("sum"),)


def test_the_one_all_reduce_moves_f32():
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    from tilefoundry.exits.stablehlo.spmd import collective_report

    (entry,) = collective_report(bf16_mlp.bf16_mlp)
    assert (entry.kind, entry.reduction, entry.count) == ("all_reduce", "sum", 1)
    assert entry.bytes_per_device == bf16_mlp.BATCH * bf16_mlp.MODEL * 4


@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_simulator_equals_numpy(compiled):
    fn = compile_pipeline(bf16_mlp.bf16_mlp)[0] if compiled else bf16_mlp.bf16_mlp
    arrays = bf16_mlp.inputs()
    got = evaluate(fn, *arrays)
    assert got.dtype.name == "float32"
    assert_close(got, bf16_mlp.reference(*arrays), "simulated", BF16_RTOL)


@pytest.mark.slow
@pytest.mark.parametrize("compiled", [False, True], ids=["as-written", "compiled"])
def test_8_xla_devices_equal_numpy(devices8, compiled):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = bf16_mlp.inputs()
    got = on_devices(devices8, NAME, arrays, compiled)
    assert_close(got, bf16_mlp.reference(*arrays), "8 XLA devices", BF16_RTOL)
