"""Micro-batch accumulation on 8 data-parallel devices, two ways (issue 26 item 3).

A data-parallel MLP: the batch of each of MICRO micro-batches is split over `dp`, the weights
are replicated. `pending_step` carries the weight gradients through the micro-batch loop in
their pending form (`Partial(sum)` over `dp`, from `reduce_gradients=False`), starting from a
pending zero, and completes each once after the loop: one all-reduce per weight per step.
`reduced_step` is the same step written as an eager system runs it: each micro-batch's gradients
are reduced inside the loop, so every weight is all-reduced MICRO times. Both take one SGD step
and return the new weights. Imported by name in the 8-device worker.
"""

import numpy as np

from tilefoundry import Tensor, func, grad
from tilefoundry.dsl import tf
from tilefoundry.ir.types import f32, make_shard_tensor_type
from tilefoundry.ir.types.shard import B, P, make_mesh

DP = make_mesh((8,), ("dp",))
MICRO, BATCH, MODEL, HIDDEN = 4, 16, 16, 32
LEARNING_RATE = 0.1
WEIGHTS = ((MODEL, HIDDEN), (HIDDEN, MODEL))


def _on_dp(shape, attr):
    return make_shard_tensor_type(shape, f32, mesh=DP, attrs=(attr,)).layout


PENDING_1, PENDING_2 = (_on_dp(shape, P("sum")) for shape in WEIGHTS)
REPLICATED_1, REPLICATED_2 = (_on_dp(shape, B) for shape in WEIGHTS)


@func
def loss(
    x: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32"],
    w2: Tensor[(HIDDEN, MODEL), "f32"],
):
    error = tf.relu(x @ w1) @ w2 - y
    return tf.reduce(error * error, axes=(0, 1), keepdim=False, kind="mean")


pending_gradients = grad(loss, argnums=(2, 3), reduce_gradients=False)
reduced_gradients = grad(loss, argnums=(2, 3))


@func
def pending_step(
    x: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32"],
    w2: Tensor[(HIDDEN, MODEL), "f32"],
):
    g1 = tf.zeros((MODEL, HIDDEN), "f32", layout=PENDING_1)
    g2 = tf.zeros((HIDDEN, MODEL), "f32", layout=PENDING_2)
    for i in range(MICRO):
        d1, d2 = pending_gradients(x[i], y[i], w1, w2)
        g1 = g1 + d1
        g2 = g2 + d2
    g1 = tf.reshard(g1, layout=REPLICATED_1)
    g2 = tf.reshard(g2, layout=REPLICATED_2)
    return w1 - g1 * (LEARNING_RATE / MICRO), w2 - g2 * (LEARNING_RATE / MICRO)


@func
def reduced_step(
    x: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32"],
    w2: Tensor[(HIDDEN, MODEL), "f32"],
):
    g1 = tf.zeros((MODEL, HIDDEN), "f32")
    g2 = tf.zeros((HIDDEN, MODEL), "f32")
    for i in range(MICRO):
        d1, d2 = reduced_gradients(x[i], y[i], w1, w2)
        g1 = g1 + d1
        g2 = g2 + d2
    return w1 - g1 * (LEARNING_RATE / MICRO), w2 - g2 * (LEARNING_RATE / MICRO)


PROGRAMS = {"pending_step": pending_step, "reduced_step": reduced_step}


def inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((MICRO, BATCH, MODEL))
    y = rng.standard_normal((MICRO, BATCH, MODEL))
    w1 = rng.standard_normal(WEIGHTS[0]) / np.sqrt(MODEL)
    w2 = rng.standard_normal(WEIGHTS[1]) / np.sqrt(HIDDEN)
    return tuple(a.astype(np.float32) for a in (x, y, w1, w2))


def numpy_step(x, y, w1, w2) -> tuple[np.ndarray, np.ndarray]:
    """The SGD step over the averaged micro-batch gradients, derived by hand in float64."""
    x, y, w1, w2 = (a.astype(np.float64) for a in (x, y, w1, w2))
    g1, g2 = np.zeros_like(w1), np.zeros_like(w2)
    for xb, yb in zip(x, y, strict=True):
        h = xb @ w1
        error = np.maximum(h, 0) @ w2 - yb
        d_out = 2 * error / error.size
        g2 += np.maximum(h, 0).T @ d_out
        g1 += xb.T @ ((d_out @ w2.T) * (h > 0))
    return w1 - g1 * (LEARNING_RATE / MICRO), w2 - g2 * (LEARNING_RATE / MICRO)


def on_devices(name: str, arrays: tuple) -> tuple[tuple, str]:
    """Run in the 8-device worker: the step on 8 XLA devices, and its compiled HLO text."""
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.exits.runtimes.xla_spmd import _compile
    from tilefoundry.exits.stablehlo.spmd import emit_spmd

    fn = PROGRAMS[name]
    result = run_xla(fn, *arrays, devices=8)
    executable, _ = _compile(emit_spmd(fn), 8)
    return tuple(result), "\n".join(m.to_string() for m in executable.hlo_modules())
