"""`tilefoundry.optim`: SGD with momentum and AdamW written in the DSL, and AdamW's ZeRO-1
variant (issue 26 item 2).

The truth for the updates is optax's formulas written out in float64 numpy (`numpy_sgd`,
`numpy_adamw`), and optax itself where it is installed; for ZeRO-1 it is the replicated
optimizer: the same steps, the same numbers, 1/dp of the state per device (by the types and by
XLA's memory analysis of the compiled steps), and the collectives the plan says: a
reduce-scatter and an all-gather per weight instead of an all-reduce.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from tilefoundry import optim
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import collective_report
from tilefoundry.ir.types import f32, i32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, S, make_mesh, shard_layout_local_shape
from train import accumulation_programs
from train import optim_programs as programs

TIMEOUT_S = 600
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
STEPS = 3
TYPES = (make_tensor_type((4, 3), f32), make_tensor_type((5,), f32))
ADAMW = {"learning_rate": 0.05, "b1": 0.8, "b2": 0.95, "eps": 1e-6, "weight_decay": 0.1}


def _params_and_grads(seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(t.shape).astype(np.float32) for t in TYPES]
    grads = [[rng.standard_normal(t.shape).astype(np.float32) for t in TYPES] for _ in range(STEPS)]
    return params, grads


def _run(optimizer, params, grads) -> list:
    state = list(optimizer.init())
    for count, g in enumerate(grads, start=1):
        out = evaluate(optimizer.update, *params, *g, *state, np.array(count, np.int32))
        params, state = list(out[: len(params)]), list(out[len(params) :])
    return params


def numpy_sgd(params, grads, learning_rate, momentum) -> list:
    params = [p.astype(np.float64) for p in params]
    trace = [np.zeros_like(p) for p in params]
    for g in grads:
        trace = [gi + momentum * m for gi, m in zip(g, trace, strict=True)]
        params = [p - learning_rate * m for p, m in zip(params, trace, strict=True)]
    return params


def numpy_adamw(params, grads, learning_rate, b1, b2, eps, weight_decay) -> list:
    params = [p.astype(np.float64) for p in params]
    mu = [np.zeros_like(p) for p in params]
    nu = [np.zeros_like(p) for p in params]
    for t, g in enumerate(grads, start=1):
        mu = [b1 * m + (1 - b1) * gi for m, gi in zip(mu, g, strict=True)]
        nu = [b2 * v + (1 - b2) * gi * gi for v, gi in zip(nu, g, strict=True)]
        params = [
            p
            - learning_rate
            * ((m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps) + weight_decay * p)
            for p, m, v in zip(params, mu, nu, strict=True)
        ]
    return params


def test_every_state_has_its_parameters_type():
    for optimizer in (optim.sgd(TYPES, learning_rate=0.1), optim.adamw(TYPES, learning_rate=0.1)):
        assert optimizer.state_types == TYPES
        params = optimizer.update.params
        assert [p.type for p in params[-1 - len(TYPES) * len(optimizer.state_names) : -1]] == [
            *TYPES
        ] * len(optimizer.state_names)
        assert params[-1].type == make_tensor_type((), i32)
        assert tuple(optimizer.update.body.type.fields) == TYPES * (1 + len(optimizer.state_names))


def test_sgd_with_momentum_follows_optax_formula():
    params, grads = _params_and_grads()
    got = _run(optim.sgd(TYPES, learning_rate=0.1, momentum=0.9), params, grads)
    for g, want in zip(got, numpy_sgd(params, grads, 0.1, 0.9), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_adamw_follows_optax_formulas_with_bias_correction_and_weight_decay():
    params, grads = _params_and_grads()
    got = _run(optim.adamw(TYPES, **ADAMW), params, grads)
    for g, want in zip(got, numpy_adamw(params, grads, **ADAMW), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_the_updates_equal_optax(name):
    optax = pytest.importorskip("optax", reason="the optax comparison needs optax (test extra)")
    import jax.numpy as jnp

    params, grads = _params_and_grads(1)
    if name == "sgd":
        ours, theirs = optim.sgd(TYPES, learning_rate=0.1), optax.sgd(0.1, momentum=0.9)
    else:
        ours, theirs = optim.adamw(TYPES, **ADAMW), optax.adamw(**ADAMW)
    want = [jnp.asarray(p) for p in params]
    state = theirs.init(want)
    for g in grads:
        updates, state = theirs.update([jnp.asarray(x) for x in g], state, want)
        want = optax.apply_updates(want, updates)
    # f32 on both sides, the same formulas in a different association: a few ulps
    for g, w in zip(_run(ours, params, grads), want, strict=True):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=1e-7)


def test_zero_state_is_split_over_dp_one_eighth_per_device():
    for zero, whole in zip(programs.ZERO.state_types, programs.WEIGHT_TYPES, strict=True):
        assert zero.shape == whole.shape
        local = shard_layout_local_shape(zero.layout)
        assert np.prod(local) * 8 == np.prod(whole.shape)


def test_zero_plans_reduce_scatter_and_all_gather_instead_of_all_reduce():
    """One collective of each kind per weight per step; the bytes each device sends for the
    gradient are the same (a reduce-scatter plus an all-gather move what an all-reduce does)."""
    replicated = collective_report(programs.replicated_step)
    zero = collective_report(programs.zero_step)
    assert [(e.kind, e.mesh_axes, e.count) for e in replicated] == [("all_reduce", "dp", 2)]
    assert [(e.kind, e.mesh_axes, e.count) for e in zero] == [
        ("reduce_scatter", "dp", 2),
        ("all_gather", "dp", 2),
    ]


def _steps_on_the_simulator(name: str) -> list:
    fn = programs.PROGRAMS[name]
    optimizer = programs.ZERO if name == "zero_step" else programs.REPLICATED
    x, y, w1, w2 = accumulation_programs.inputs()
    state = list(optimizer.init())
    for count in range(1, STEPS + 1):
        w1, w2, *state = evaluate(fn, x[0], y[0], w1, w2, *state, np.array(count, np.int32))
    return [w1, w2]


def test_zero_steps_equal_the_replicated_optimizers_on_the_simulator():
    for zero, replicated in zip(
        _steps_on_the_simulator("zero_step"),
        _steps_on_the_simulator("replicated_step"),
        strict=True,
    ):
        np.testing.assert_allclose(zero, replicated, rtol=1e-6, atol=1e-7)


def test_zero_refuses_what_it_cannot_split_naming_the_parameter():
    dp = make_mesh((4,), ("dp",))
    sharded = make_shard_tensor_type((8, 4), f32, mesh=dp, attrs=(S(0),))
    with pytest.raises(VerifyError, match=r"adamw: parameter 0 \(\(8, 4\)\) is sharded"):
        optim.adamw((sharded,), learning_rate=0.1, zero_axis="dp")
    odd = make_shard_tensor_type((3, 5), f32, mesh=dp, attrs=(B,))
    with pytest.raises(VerifyError, match="no axis divides by the 4 devices of mesh axis 'dp'"):
        optim.sgd((odd,), learning_rate=0.1, zero_axis="dp")
    with pytest.raises(VerifyError, match="has axes \\['dp'\\], not the ZeRO axis 'data'"):
        optim.sgd((odd,), learning_rate=0.1, zero_axis="data")
    with pytest.raises(VerifyError, match="has no mesh"):
        optim.sgd(TYPES, learning_rate=0.1, zero_axis="dp")
    with pytest.raises(VerifyError, match="2 parameter type\\(s\\) but 1 gradient type"):
        optim.sgd(TYPES, learning_rate=0.1, grad_types=TYPES[:1])


@pytest.mark.slow
def test_zero_on_8_xla_devices_equals_replicated_with_an_eighth_of_the_state(devices8):
    """XLA's memory analysis of the compiled steps: the arguments differ by exactly 7/8 of the
    two AdamW states (mu, nu) of both weights."""
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    x, y, w1, w2 = accumulation_programs.inputs()
    found = devices8.submit(programs.on_devices, (x[0], y[0], w1, w2), STEPS).result(TIMEOUT_S)
    (zero, zero_bytes), (replicated, replicated_bytes) = (
        found["zero_step"],
        found["replicated_step"],
    )
    for z, r, s in zip(zero, replicated, _steps_on_the_simulator("replicated_step"), strict=True):
        np.testing.assert_allclose(z, r, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(r, s, rtol=1e-5, atol=1e-6)
    state_bytes = 2 * sum(4 * int(np.prod(shape)) for shape in accumulation_programs.WEIGHTS)
    assert replicated_bytes - zero_bytes == state_bytes * 7 // 8


@pytest.mark.slow
def test_zero_accumulation_reduce_scatters_each_weight_once_outside_the_loop(devices8):
    """Issue 26 "Done when": with ZeRO, one reduce-scatter per parameter per step, outside the
    micro-batch loop, counted in XLA's compiled HLO (operands counted: its combiner may merge
    weights into one instruction); the updated weights' all-gathers are outside it too."""
    sys.path.insert(0, str(BENCHMARKS))
    from communication import hlo_collective_executions

    hlo = devices8.submit(programs.zero_accumulation_hlo).result(timeout=TIMEOUT_S)
    found = hlo_collective_executions(hlo)
    weight_bytes = sorted(4 * int(np.prod(s)) for s in accumulation_programs.WEIGHTS)
    scatters = [c for c in found if c["kind"] == "reduce-scatter"]
    assert sorted(b for c in scatters for b in c["operand_bytes"]) == weight_bytes
    assert {(c["in_loop"], c["executions"]) for c in found} == {(False, 1)}
    assert sorted({c["kind"] for c in found}) == ["all-gather", "reduce-scatter"]
