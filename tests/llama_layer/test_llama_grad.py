"""The gradient of the Llama layer, every sharding (issue 25 "Done when", DESIGN §4.18).

For examples/llama.py's TP (8 devices), DP x TP (2 x 4) and sequence-parallel layers and its
stacked-layer loop (issue 25 item 4), the gradient of loss = mean(layer(x) * R) with respect to
the input and every weight:
- passes `check` (the verifier re-types every node);
- on the mesh simulator equals `jax.grad` of the same math (f32, rel 1e-5 of each gradient's
  scale) and reproduces the float64 numpy layer's directional derivatives;
- runs on 8 XLA devices, as written and fused (`compile`), equal to `jax.jit(jax.grad(...))`
  with the same NamedShardings;
- communicates the minimum, never more bytes per device than JAX's compiled backward: the TP
  backward adds Megatron's 2 all-reduces (one per column-parallel block's input gradient; the
  norm weights, replicated over tp, need none), each DP parameter gradient is all-reduced once
  over dp, and with `reduce_gradients=False` a DP weight gradient stays `Partial(sum)`, so two
  micro-batches are reduced once; the stacked layers' backward is a loop whose iterations each
  all-reduce like one layer's backward, inside the compiled while loop.
"""

from collections import Counter

import numpy as np
import pytest

from llama_layer import llama_cases as cases
from llama_layer import llama_grad_cases as grads
from llama_layer import llama_grad_worker as worker
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types.shard import P
from tilefoundry.passes import verify

pytestmark = pytest.mark.slow  # 8-device XLA runs and whole-layer gradients: seconds each

TIMEOUT_S = 600
ACTIVATION_BYTES = 2 * 8 * 64 * 4
"""One (batch, seq, hidden) f32 activation per device: what a TP all-reduce moves."""


@pytest.mark.parametrize("name", grads.VARIANTS)
def test_the_gradient_type_checks_with_each_parameter_type(name):
    fn = grads.gradient(name)
    verify(fn)
    layer = cases.program(name)
    for param, field in zip(layer.params, fn.return_type.fields, strict=True):
        assert field.shape == param.type.shape and field.dtype == param.type.dtype
        if param.type.layout is not None:  # a sharded parameter: exactly its type
            assert field.layout.attrs == param.type.layout.attrs, param.name


@pytest.mark.parametrize("name", grads.VARIANTS)
def test_the_simulated_gradient_equals_jax(name):
    jax = pytest.importorskip("jax", reason="the reference is jax.grad")
    arrays = cases.inputs(name)
    want = jax.grad(grads.jax_loss(name), argnums=tuple(range(len(grads.PARAMETERS))))(*arrays)
    got = evaluate(grads.gradient(name), *arrays)
    grads.assert_gradients_match(got, want, f"{name} simulated")


@pytest.mark.parametrize("name", grads.VARIANTS)
def test_the_simulated_gradient_reproduces_float64_directional_derivatives(name):
    """<grad, v> = (loss(p + eps v) - loss(p - eps v)) / 2 eps for a random direction v of each
    parameter, the losses computed by the float64 numpy layer (independent of tilefoundry)."""
    arrays = cases.inputs(name)
    got = evaluate(grads.gradient(name), *arrays)
    rng = np.random.default_rng(5)
    eps = 1e-4
    wide = [a.astype(np.float64) for a in arrays]
    for index, param in enumerate(grads.PARAMETERS):
        direction = rng.standard_normal(arrays[index].shape)
        moved = [list(wide), list(wide)]
        moved[0][index] = wide[index] + eps * direction
        moved[1][index] = wide[index] - eps * direction
        numeric = (grads.numpy_loss(name, moved[0]) - grads.numpy_loss(name, moved[1])) / (2 * eps)
        analytic = float(np.sum(got[index].astype(np.float64) * direction))
        assert abs(numeric - analytic) <= 1e-4 * max(abs(numeric), 1e-3), (param, numeric)


def _on_devices(pool, task, *args):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    return pool.submit(task, *args).result(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def jax_side(devices8):
    """JAX's sharded gradients and compiled collectives, per variant."""
    return {
        name: _on_devices(devices8, worker.jax_gradients, name, cases.inputs(name))
        for name in grads.VARIANTS
    }


@pytest.mark.parametrize("compiled", [False, True], ids=["as written", "fused"])
@pytest.mark.parametrize("name", grads.VARIANTS)
def test_the_gradient_on_8_xla_devices_equals_jax(name, compiled, devices8, jax_side):
    status, value = _on_devices(devices8, worker.ours, name, cases.inputs(name), compiled)
    assert status == "ok", value
    got, *_ = value
    want, _ = jax_side[name]
    grads.assert_gradients_match(got, want, f"{name} on 8 devices")


def _backward(name: str, ours: list) -> list:
    """Our collectives beyond the forward's live ones: the forward layer's own plan minus the
    one whose result the gradient never reads (the last residual's completion)."""
    from tilefoundry.exits.stablehlo.spmd import collective_report

    forward = [
        (e.kind.replace("_", "-"), e.mesh_axes, e.result_bytes_per_device)
        for e in collective_report(cases.program(name))
        for _ in range(e.count)
    ]
    live = Counter(forward) - Counter(forward[-1:])
    total = Counter(c[:3] for c in ours)
    assert not live - total, (live, total)
    return sorted((total - live).elements())


@pytest.fixture(scope="module")
def our_collectives(devices8):
    """Our collectives per variant, as the SPMD exit records them (once per instruction), and
    the kinds of those the compiled HLO holds inside a while loop; the compiled executable
    moves exactly these bytes (XLA adds no collective to a manually partitioned module; it may
    combine several all-reduces into one)."""
    result = {}
    for name in grads.VARIANTS:
        status, value = _on_devices(devices8, worker.ours, name, cases.inputs(name), False)
        assert status == "ok", value
        _, report, compiled, in_loops = value
        assert _bytes_by_kind((c[0], c[2]) for c in report) == _bytes_by_kind(
            (kind, out) for kind, out, _ in compiled
        ), name
        result[name] = report, in_loops
    return result


def _bytes_by_kind(collectives) -> dict[str, int]:
    """Result bytes per device of each kind of collective, from (kind, bytes) pairs."""
    totals: dict[str, int] = {}
    for kind, size in collectives:
        totals[kind] = totals.get(kind, 0) + size
    return totals


def test_the_tp_backward_has_megatrons_two_all_reduces(our_collectives):
    backward = _backward("llama_tp", our_collectives["llama_tp"][0])
    assert backward == [("all-reduce", "tp", ACTIVATION_BYTES)] * 2


def test_dp_parameter_gradients_are_all_reduced_once_each(our_collectives):
    """Over dp: one all-reduce per parameter (its local 1/tp block); over tp: Megatron's 2."""
    backward = _backward("llama_dp_tp", our_collectives["llama_dp_tp"][0])
    over_tp = [c for c in backward if c[1] == "tp"]
    over_dp = [c for c in backward if c[1] == "dp"]
    assert over_tp == [("all-reduce", "tp", ACTIVATION_BYTES // 2)] * 2
    assert len(over_dp) == len(grads.PARAMETERS) - 1  # every weight; x's gradient is split
    assert all(kind == "all-reduce" for kind, *_ in over_dp)
    layer = cases.program("llama_dp_tp")
    want = sorted(
        4 * np.prod(p.type.shape) // (4 if p.type.layout else 1) for p in layer.params[1:]
    )
    assert sorted(c[2] for c in over_dp) == want


def test_sequence_parallel_backward_reduce_scatters_the_input_gradients(our_collectives):
    """The all-gathers before attention and the MLP transpose to reduce-scatters; the
    sequence-split norm weights' gradients are all-reduced (as Megatron-SP does)."""
    backward = _backward("llama_sp", our_collectives["llama_sp"][0])
    kinds = sorted(c[0] for c in backward)
    assert kinds == ["all-gather", "all-reduce", "all-reduce", "reduce-scatter", "reduce-scatter"]
    assert all(c[2] == 64 * 4 for c in backward if c[0] == "all-reduce")


def test_the_stacked_layers_backward_all_reduces_inside_its_loop(our_collectives):
    """The stacked-layer loop's gradient: a forward loop and a backward loop over the layers,
    each iteration with its layer's 2 all-reduces over tp (the forward's row projections, then
    Megatron's 2 in the backward), every one inside a while loop of the compiled HLO and run
    once per layer; nothing is communicated outside the loops."""
    report, in_loops = our_collectives["llama_stack"]
    layers = int(cases.program("llama_stack").params[1].type.shape[0])
    assert [c[:3] for c in report] == [("all-reduce", "tp", ACTIVATION_BYTES)] * 4
    assert all(c[4] == layers for c in report)
    assert in_loops == ["all-reduce"] * 4


@pytest.mark.parametrize("name", grads.VARIANTS)
def test_never_more_bytes_per_device_than_jax(name, our_collectives, jax_side):
    """Per device, what every collective puts in and what it gets back, summed over the
    gradient program's instructions: ours against JAX's compiled `jax.jit(jax.grad(...))` (for
    the stacked layers, both loop over the layers: one iteration's collectives each)."""
    ours = [sum(c[i] for c in our_collectives[name][0]) for i in (3, 2)]
    theirs = [sum(c[i] for c in jax_side[name][1]) for i in (2, 1)]
    assert 0 < ours[0] <= theirs[0] and 0 < ours[1] <= theirs[1], (ours, theirs)


def test_pending_dp_gradients_have_no_collectives_and_are_reduced_once_per_step(devices8):
    """reduce_gradients=False: every weight gradient is Partial(sum) over dp (no collective in
    the gradient); two micro-batches summed and completed take one all-reduce per weight."""
    pending = grads.gradient("llama_dp_tp", reduce_gradients=False)
    for field in pending.return_type.fields[1:]:
        assert field.layout.attrs[0] == P("sum")
    collectives = _on_devices(devices8, worker.accumulation_collectives, "llama_dp_tp")
    over_dp = [c for c in collectives if c[1] == "dp"]
    assert len(over_dp) == len(grads.PARAMETERS) - 1
    arrays = cases.inputs("llama_dp_tp")
    second = np.random.default_rng(9).standard_normal(arrays[0].shape).astype(np.float32)
    summed = evaluate(grads.accumulation_step("llama_dp_tp"), arrays[0], second, *arrays[1:])
    one = evaluate(grads.gradient("llama_dp_tp"), *arrays)
    two = evaluate(grads.gradient("llama_dp_tp"), second, *arrays[1:])
    for got, a, b in zip(summed, one[1:], two[1:], strict=True):
        np.testing.assert_allclose(got, a + b, rtol=1e-5, atol=1e-6 * float(np.max(np.abs(a))))
