"""Training steps of the data-parallel MLP of `accumulation_programs` with AdamW (issue 26
item 2): `replicated_step` reduces the gradients (an all-reduce each) and updates replicated
optimizer state; `zero_step` keeps them pending, and its ZeRO-1 AdamW reduce-scatters each into
the state's split over `dp`, updates that 1/8 slice and all-gathers the new weight."""

from tilefoundry import Tensor, func, grad, optim
from tilefoundry.dsl import tf
from tilefoundry.ir.types import f32, i32, make_shard_tensor_type
from tilefoundry.ir.types.shard import B
from train.accumulation_programs import (
    BATCH,
    DP,
    HIDDEN,
    MICRO,
    MODEL,
    PENDING_1,
    PENDING_2,
    WEIGHTS,
    loss,
)

LEARNING_RATE = 0.01
WEIGHT_TYPES = tuple(make_shard_tensor_type(shape, f32, mesh=DP, attrs=(B,)) for shape in WEIGHTS)
REPLICATED = optim.adamw(WEIGHT_TYPES, learning_rate=LEARNING_RATE)
ZERO = optim.adamw(
    WEIGHT_TYPES,
    learning_rate=LEARNING_RATE,
    grad_types=tuple(optim.pending_type(t, "dp") for t in WEIGHT_TYPES),
    zero_axis="dp",
)
R1, R2 = (optim_type.layout for optim_type in REPLICATED.state_types)
Z1, Z2 = (optim_type.layout for optim_type in ZERO.state_types)
W1, W2 = (t.layout for t in WEIGHT_TYPES)

reduced = grad(loss, argnums=(2, 3))
pending = grad(loss, argnums=(2, 3), reduce_gradients=False)


@func
def replicated_step(
    x: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32", W1],
    w2: Tensor[(HIDDEN, MODEL), "f32", W2],
    mu1: Tensor[(MODEL, HIDDEN), "f32", R1],
    mu2: Tensor[(HIDDEN, MODEL), "f32", R2],
    nu1: Tensor[(MODEL, HIDDEN), "f32", R1],
    nu2: Tensor[(HIDDEN, MODEL), "f32", R2],
    step: Tensor[(), "i32"],
):
    g1, g2 = reduced(x, y, w1, w2)
    return REPLICATED.update(w1, w2, g1, g2, mu1, mu2, nu1, nu2, step)


@func
def zero_step(
    x: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32", W1],
    w2: Tensor[(HIDDEN, MODEL), "f32", W2],
    mu1: Tensor[(MODEL, HIDDEN), "f32", Z1],
    mu2: Tensor[(HIDDEN, MODEL), "f32", Z2],
    nu1: Tensor[(MODEL, HIDDEN), "f32", Z1],
    nu2: Tensor[(HIDDEN, MODEL), "f32", Z2],
    step: Tensor[(), "i32"],
):
    g1, g2 = pending(x, y, w1, w2)
    return ZERO.update(w1, w2, g1, g2, mu1, mu2, nu1, nu2, step)


@func
def zero_accumulation_step(
    x: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32", W1],
    w2: Tensor[(HIDDEN, MODEL), "f32", W2],
    mu1: Tensor[(MODEL, HIDDEN), "f32", Z1],
    mu2: Tensor[(HIDDEN, MODEL), "f32", Z2],
    nu1: Tensor[(MODEL, HIDDEN), "f32", Z1],
    nu2: Tensor[(HIDDEN, MODEL), "f32", Z2],
    step: Tensor[(), "i32"],
):
    """MICRO micro-batches accumulated pending, then ZeRO-1 AdamW: each weight's gradient is
    reduce-scattered once per step, after the loop (the sum of the micro-batches' mean losses:
    the optimizer's normalised update does not care for the scale)."""
    g1 = tf.zeros((MODEL, HIDDEN), "f32", layout=PENDING_1)
    g2 = tf.zeros((HIDDEN, MODEL), "f32", layout=PENDING_2)
    for i in range(MICRO):
        d1, d2 = pending(x[i], y[i], w1, w2)
        g1 = g1 + d1
        g2 = g2 + d2
    return ZERO.update(w1, w2, g1, g2, mu1, mu2, nu1, nu2, step)


PROGRAMS = {"replicated_step": replicated_step, "zero_step": zero_step}


def on_devices(arrays: tuple, steps: int) -> dict:
    """Run in the 8-device worker: each step `steps` times on 8 XLA devices (tilefoundry.jit,
    state donated), the final weights, and XLA's per-device argument bytes of each compiled
    step (its memory analysis)."""
    import numpy as np

    from tilefoundry import jit
    from tilefoundry.exits.runtimes.device_step import fetch

    found = {}
    for name, fn in PROGRAMS.items():
        optimizer = ZERO if name == "zero_step" else REPLICATED
        step = jit(fn, devices=8, donate_argnums=tuple(range(2, 8)))
        state = step.place(*arrays, *optimizer.init(), np.array(1, np.int32))
        analysis = step.compiled(*state).memory_analysis()
        data, state = state[:2], state[2:8]
        for count in range(1, steps + 1):
            state = step(*data, *state, np.array(count, np.int32))
        found[name] = (fetch(state[:2]), analysis.argument_size_in_bytes)
    return found


def zero_accumulation_hlo() -> str:
    """Run in the 8-device worker: XLA's compiled HLO of `zero_accumulation_step`."""
    from tilefoundry.exits.runtimes.xla_spmd import _compile
    from tilefoundry.exits.stablehlo.spmd import emit_spmd

    executable, _ = _compile(emit_spmd(zero_accumulation_step), 8)
    return "\n".join(m.to_string() for m in executable.hlo_modules())
