"""The gradient of examples/llama.py's layer (issue 25, "Done when"): the loss, its references.

The loss is the mean of the layer's output times a fixed random tensor R; its gradient with
respect to the input and every weight is `tilefoundry.grad(loss, argnums=all)`. References:
`jax.grad` of the same math written in jax.numpy (run under `jax.jit` with the same shardings by
the 8-device worker), and the float64 numpy layer of llama_reference.py, whose directional
derivatives (central differences) the gradient must reproduce. Shared by the tests and by the
8-device worker, which receives only a variant name.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from llama_layer import llama_cases as cases
from llama_layer import llama_reference as reference
from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.ir.core import Call, Constant, Tuple, Var
from tilefoundry.ir.hir import Function

VARIANTS = ("llama_tp", "llama_dp_tp", "llama_sp", "llama_stack")
PARAMETERS = ("x", *reference.WEIGHT_NAMES)

COLUMN, ROW, REPLICATED = (None, "tp"), ("tp", None), (None,)
WEIGHT_SPECS = (REPLICATED, COLUMN, COLUMN, COLUMN, ROW, REPLICATED, COLUMN, COLUMN, ROW)
SPECS = {
    "llama_tp": ((None, None, None), *WEIGHT_SPECS),
    "llama_dp_tp": (("dp", None, None), *WEIGHT_SPECS),
    "llama_sp": ((None, "tp", None), *WEIGHT_SPECS),
    "llama_stack": ((None, None, None), *((None, *spec) for spec in WEIGHT_SPECS)),
}
"""Each parameter's sharding as a JAX PartitionSpec (the DSL annotations of examples/llama.py)."""

RESIDUAL_SPEC = {"llama_tp": (None,) * 3, "llama_dp_tp": ("dp", None, None)}
RESIDUAL_SPEC["llama_sp"] = (None, "tp", None)
RESIDUAL_SPEC["llama_stack"] = RESIDUAL_SPEC["llama_tp"]
"""Where the DSL program reshards each row projection's pending sum (JAX's constraint there)."""


@cache
def projection(name: str) -> np.ndarray:
    """The fixed random tensor R of the loss mean(layer(x) * R)."""
    shape = cases.inputs(name)[0].shape
    return np.random.default_rng(25).standard_normal(shape).astype(np.float32)


@cache
def loss(name: str) -> Function:
    """mean(layer(x, weights...) * R) over the layer's own parameters."""
    layer = cases.program(name)
    params = tuple(Var(p.name, p.type) for p in layer.params)
    out = Call(layer, params)
    body = tf.reduce(tf.mul(out, Constant(projection(name))), axes=(0, 1, 2), keepdim=False)
    return Function(f"loss_{name}", params, body, TypeInferContext().infer(body))


@cache
def gradient(name: str, reduce_gradients: bool = True) -> Function:
    return grad(
        loss(name), argnums=tuple(range(len(PARAMETERS))), reduce_gradients=reduce_gradients
    )


@cache
def accumulation_step(name: str) -> Function:
    """Two micro-batches' weight gradients, each left pending (`reduce_gradients=False`), summed
    and completed once into each weight's type: the accumulation the option exists for."""
    layer = cases.program(name)
    pending = gradient(name, reduce_gradients=False)
    complete = gradient(name).return_type.fields
    weights = tuple(Var(p.name, p.type) for p in layer.params[1:])
    batches = tuple(Var(f"x{i}", layer.params[0].type) for i in (1, 2))
    sums = []
    for index in range(1, len(PARAMETERS)):
        parts = [tf.tuple_get_item(Call(pending, (x, *weights)), index=index) for x in batches]
        total = tf.add(*parts)
        sums.append(tf.reshard(total, layout=complete[index].layout, storage="gmem"))
    body = Tuple(tuple(sums))
    params = (*batches, *weights)
    return Function(f"accumulate_{name}", params, body, TypeInferContext().infer(body))


def numpy_loss(name: str, arrays: tuple[np.ndarray, ...]) -> float:
    """The float64 numpy reference of the loss."""
    x, *weights = arrays
    named = dict(zip(reference.WEIGHT_NAMES, weights, strict=True))
    forward = reference.stack if name == "llama_stack" else reference.layer
    out = forward(x, named, cases.config())
    return float(np.mean(out * projection(name).astype(np.float64)))


def jax_loss(name: str, constrain: Any = None):
    """The loss in jax.numpy, the same math as llama_reference.layer; `constrain(v, spec)`
    places JAX's sharding constraint where the DSL program reshards (None: no constraint)."""
    import jax
    import jax.numpy as jnp

    config = cases.config()
    r = projection(name)
    positions = np.arange(config.seq)
    half = config.head_dim // 2
    inv_freq = config.rope_base ** (-np.arange(half) * 2 / config.head_dim)
    angles = np.outer(positions, inv_freq)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1).astype(np.float32)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1).astype(np.float32)
    future = np.triu(np.ones((config.seq, config.seq), bool), k=1)
    place = constrain or (lambda value, spec: value)
    residual = RESIDUAL_SPEC[name]

    def rms_norm(v, w):
        return v / jnp.sqrt(jnp.mean(v * v, axis=-1, keepdims=True) + config.eps) * w

    def heads(v):
        batch, seq, _ = v.shape
        return v.reshape(batch, seq, config.heads, config.head_dim).transpose(0, 2, 1, 3)

    def rotary(v):
        return v * cos + jnp.concatenate([-v[..., half:], v[..., :half]], axis=-1) * sin

    def layer(x, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down):
        h = rms_norm(x, attn_norm)
        q, k, v = rotary(heads(h @ wq)), rotary(heads(h @ wk)), heads(h @ wv)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(config.head_dim)
        attended = jax.nn.softmax(jnp.where(future, -1e9, scores), axis=-1) @ v
        batch, _, seq, _ = attended.shape
        merged = attended.transpose(0, 2, 1, 3).reshape(batch, seq, config.hidden)
        x = x + place(merged @ wo, residual)
        g = rms_norm(x, mlp_norm)
        return x + place((jax.nn.silu(g @ w_gate) * (g @ w_up)) @ w_down, residual)

    if name != "llama_stack":
        return lambda *arrays: jnp.mean(layer(*arrays) * r)

    def stack(x, *stacked):
        """The layer once per row of the stacked weights, as a scan (JAX's loop over layers)."""
        out, _ = jax.lax.scan(lambda carry, weights: (layer(carry, *weights), None), x, stacked)
        return out

    return lambda *arrays: jnp.mean(stack(*arrays) * r)


def assert_gradients_match(got: Any, want: Any, what: str) -> None:
    """f32 gradients equal to the reference within rel 1e-5 of each gradient's scale."""
    assert len(got) == len(want) == len(PARAMETERS), what
    for param, g, w in zip(PARAMETERS, got, want, strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == np.float32 and g.shape == w.shape, f"{what} d{param}: {g.dtype}{g.shape}"
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(
            g, w, rtol=1e-5, atol=1e-5 * scale, err_msg=f"{what}: d{param}"
        )  # fmt: skip
