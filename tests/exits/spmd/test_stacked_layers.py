"""An L-layer stack written as a loop over stacked per-layer weights runs on 8 XLA devices
(issue 15 item 3): `for layer in range(L): a = tf.gather(w1, layer, axis=0) ...` with the
weights sharded Megatron-style and a residual, equal to the simulation and to float64 numpy,
with exactly one all-reduce per layer, emitted once inside the per-device while loop.

The loop is this branch's; the Gather SPMD rule and the simulator's reading of a replicated-typed
residual are issue 15 items 1 and 2, so this file passes once those land with it."""

import re

import numpy as np

from exits.spmd import spmd_worker
from exits.spmd.sharded_programs import LAYERS, STACKED
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import collective_report, emit_spmd

TIMEOUT_S = 120


def numpy_stack(x, w1, w2):
    x, w1, w2 = (a.astype(np.float64) for a in (x, w1, w2))
    for layer in range(LAYERS):
        h = x @ w1[layer]
        gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
        x = x + gelu @ w2[layer]
    return x


def test_the_stacked_layers_run_on_8_devices_like_numpy_and_the_simulation(devices8):
    program = STACKED["stacked_megatron"]
    rng = np.random.default_rng(7)
    arrays = tuple(
        (0.2 * rng.standard_normal(tuple(int(d) for d in p.type.shape))).astype(np.float32)
        for p in program.sharded.params
    )
    want = numpy_stack(*arrays)
    got = devices8.submit(spmd_worker.run_program, "stacked_megatron", arrays, 8).result(
        timeout=TIMEOUT_S
    )
    simulated = evaluate(program.sharded, *arrays)
    for result in (got, simulated):
        np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-5)
    text = emit_spmd(program.sharded)
    loop = text[text.index('"stablehlo.while"') : text.index("sdy.return")]
    assert re.findall(r'"stablehlo\.(all_\w+|reduce_scatter)"', text) == ["all_reduce"]
    assert '"stablehlo.all_reduce"' in loop
    (entry,) = collective_report(program.sharded)
    assert (entry.kind, entry.count, entry.emitted) == ("all_reduce", LAYERS, 1)
