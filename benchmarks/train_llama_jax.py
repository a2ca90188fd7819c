"""examples/train_llama.py written in jax.numpy: the JAX + optax peer of the training example
(issue 26 item 7), shared by benchmarks/train_step.py (step time) and tests/train (the first
20 steps equal). The same model (two of examples/llama.py's decoder layers between a one-hot
embedding and an LM head, mean next-token cross-entropy), the same initial parameters and
batches (the example's own `start` and `batch`), optax.adamw with the example's learning rate
and optax's defaults (which are tilefoundry.optim.adamw's), under `jax.jit` with the example's
NamedShardings on a 2 x 4 (dp, tp) mesh, the state donated as ours is. Needs 8 jax devices.
"""

import sys
from functools import partial
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def example():
    """examples/train_llama.py as a module (and examples/llama.py, which it imports)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import train_llama

    return train_llama


def _layer(x, w, llama):
    import jax
    import jax.numpy as jnp

    def rms_norm(v, weight):
        return v / jnp.sqrt(jnp.mean(v * v, axis=-1, keepdims=True) + llama.EPS) * weight

    def heads(v):
        return v.reshape(llama.BATCH, llama.SEQ, llama.HEADS, llama.HEAD_DIM).transpose(0, 2, 1, 3)

    def rope(v):
        half = llama.HEAD_DIM // 2
        rotated = jnp.concatenate([-v[..., half:], v[..., :half]], axis=-1)
        return v * llama.COS[: llama.SEQ] + rotated * llama.SIN[: llama.SEQ]

    h = rms_norm(x, w["attn_norm"])
    q, k, v = (heads(h @ w[name]) for name in ("wq", "wk", "wv"))
    q, k = rope(q), rope(k)
    scores = q @ k.transpose(0, 1, 3, 2) * llama.SCALE + llama.CAUSAL_MASK
    attended = jax.nn.softmax(scores, axis=-1) @ v
    merged = attended.transpose(0, 2, 1, 3).reshape(llama.BATCH, llama.SEQ, llama.HIDDEN)
    x = x + merged @ w["wo"]
    g = rms_norm(x, w["mlp_norm"])
    return x + (jax.nn.silu(g @ w["w_gate"]) * (g @ w["w_up"])) @ w["w_down"]


def jax_step():
    """(step, params, opt_state, data sharding): the jitted step `step(params, opt_state,
    tokens, targets) -> (loss, params, opt_state)` and the placed initial state."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    model = example()
    import llama

    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("dp", "tp"))
    column, row = P(None, "tp"), P("tp", None)
    per_layer = {"wq": column, "wk": column, "wv": column, "wo": row, "w_gate": column,
                 "w_up": column, "w_down": row}  # fmt: skip
    specs = {n: per_layer.get(n.rsplit("_", 1)[0], P()) for n in model.NAMES}
    shardings = {n: NamedSharding(mesh, s) for n, s in specs.items()}
    data = NamedSharding(mesh, P("dp", None, None))

    def loss(params, tokens, targets):
        x = tokens @ params["embed"]
        for layer in range(2):
            names = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")
            x = _layer(x, {n: params[f"{n}_{layer}"] for n in names}, llama)
        norm = jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + llama.EPS)
        logits = x / norm * params["final_norm"] @ params["head"]
        log_total = jnp.log(jnp.sum(jnp.exp(logits), axis=-1))
        return jnp.mean(log_total - jnp.sum(logits * targets, axis=-1))

    optimizer = optax.adamw(model.LEARNING_RATE)

    @partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    start = model.start()
    params = {n: jax.device_put(start.arrays[n], shardings[n]) for n in model.NAMES}
    return step, params, optimizer.init(params), data


def jax_reference(steps: int) -> tuple[list[float], dict]:
    """The first `steps` steps from the example's initial state: each loss, the parameters."""
    import jax

    model = example()
    step, params, opt_state, data = jax_step()
    rng = np.random.default_rng()
    rng.bit_generator.state = model.start().rng
    losses = []
    for _ in range(steps):
        tokens, targets = (jax.device_put(a, data) for a in model.batch(rng))
        value, params, opt_state = step(params, opt_state, tokens, targets)
        losses.append(float(value))
    return losses, {n: np.asarray(a) for n, a in params.items()}
