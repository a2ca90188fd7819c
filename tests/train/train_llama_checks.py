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
