"""examples/train_llama.py against JAX (issue 26 item 7): the same model written in jax.numpy,
the same initial parameters and batches, optax.adamw with the same hyperparameters, under
`jax.jit` with the same NamedShardings on a 2 x 4 (dp, tp) mesh. Run by name in the 8-device
worker; returns numpy only."""

import sys
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example():
    sys.path.insert(0, str(EXAMPLES))
    import train_llama

    return train_llama


def ours(steps: int, compared: int) -> tuple[list[float], dict]:
    """The example's own training loop on 8 XLA devices for `steps` steps, stopped after step
    `compared` for its parameters and resumed from that state (the checkpoint's path); the
    losses of every step and the parameters after step `compared`."""
    model = example()
    state, losses = model.train(model.start(), compared)
    params = {name: state.arrays[name] for name in model.NAMES}
    _, rest = model.train(state, steps)
    return losses + rest, params


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


def jax_reference(steps: int) -> tuple[list[float], dict]:
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

    @jax.jit
    def step(params, opt_state, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    start = model.start()
    params = {n: jax.device_put(start.arrays[n], shardings[n]) for n in model.NAMES}
    opt_state = optimizer.init(params)
    rng = np.random.default_rng()
    rng.bit_generator.state = start.rng
    losses = []
    for _ in range(steps):
        tokens, targets = (jax.device_put(a, data) for a in model.batch(rng))
        value, params, opt_state = step(params, opt_state, tokens, targets)
        losses.append(float(value))
    return losses, {n: np.asarray(a) for n, a in params.items()}
