"""examples/train_llama.py and its JAX + optax peer (benchmarks/train_llama_jax.py), run by
name in the 8-device worker (issue 26 item 7); returns numpy only."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from train_llama_jax import example, jax_reference

__all__ = ["example", "jax_reference", "ours"]


def ours(steps: int, compared: int) -> tuple[list[float], dict]:
    """The example's own training loop on 8 XLA devices for `steps` steps, stopped after step
    `compared` for its parameters and resumed from that state (the checkpoint's path); the
    losses of every step and the parameters after step `compared`."""
    model = example()
    state, losses = model.train(model.start(), compared)
    params = {name: state.arrays[name] for name in model.NAMES}
    _, rest = model.train(state, steps)
    return losses + rest, params


def xla_memory() -> dict[str, tuple[int, int, int, int]]:
    """XLA's memory analysis of each compiled step on 8 devices (argument, output, alias,
    temporary bytes per device): the training example's and the two AdamW steps of
    optim_programs."""
    import numpy as np

    import tilefoundry
    from train import accumulation_programs
    from train import optim_programs as programs

    model = example()
    steps = {"train_step": (model.train_step, model.batch(np.random.default_rng(0)),
                            list(model.start().arrays.values()))}  # fmt: skip
    x, y, w1, w2 = accumulation_programs.inputs()
    for name, fn in programs.PROGRAMS.items():
        optimizer = programs.ZERO if name == "zero_step" else programs.REPLICATED
        steps[name] = (fn, (x[0], y[0]), [w1, w2, *optimizer.init()])
    found = {}
    for name, (fn, data, state) in steps.items():
        step = tilefoundry.jit(fn, devices=8, donate_argnums=range(2, 2 + len(state)))
        analysis = step.compiled(*step.place(*data, *state, np.int32(1))).memory_analysis()
        found[name] = (analysis.argument_size_in_bytes, analysis.output_size_in_bytes,
                       analysis.alias_size_in_bytes, analysis.temp_size_in_bytes)  # fmt: skip
    return found
