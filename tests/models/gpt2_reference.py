"""examples/gpt2.py's loss in float64 numpy, written from the GPT-2 model code (and Megatron's
vocab-parallel cross-entropy, which is the plain cross-entropy on the whole vocabulary), and the
inputs the tests give it."""

from __future__ import annotations

import numpy as np

from models.programs import example

EXAMPLE = "examples/gpt2.py"


def constants() -> dict:
    return example(EXAMPLE)


def loss(tokens, targets, *weights) -> np.ndarray:
    c = constants()
    batch, seq, dim, heads = c["BATCH"], c["SEQ"], c["DIM"], c["HEADS"]
    head_dim, eps = dim // heads, c["EPS"]
    w = [a.astype(np.float64) for a in weights]
    wte, wpe, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo = w[:12]
    ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj, lnf_w, lnf_b = w[12:]

    def layer_norm(x, weight, bias):
        centred = x - x.mean(axis=-1, keepdims=True)
        return centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps) * weight + bias

    def split_heads(x):
        return x.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

    def gelu(x):
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))

    x = wte[tokens] + wpe
    h = layer_norm(x, ln1_w, ln1_b)
    q, k, v = (split_heads(h @ m + b) for m, b in ((wq, bq), (wk, bk), (wv, bv)))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_dim) + c["CAUSAL_MASK"]
    weights_ = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights_ /= weights_.sum(axis=-1, keepdims=True)
    merged = (weights_ @ v).transpose(0, 2, 1, 3).reshape(batch, seq, dim)
    x = x + merged @ wo + bo
    x = x + gelu(layer_norm(x, ln2_w, ln2_b) @ w_fc + b_fc) @ w_proj + b_proj
    logits = layer_norm(x, lnf_w, lnf_b).reshape(batch * seq, dim) @ wte.T
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return np.asarray(-np.take_along_axis(log_probs, targets, axis=1).mean())


def weights(fn, seed: int = 0) -> list[np.ndarray]:
    """Per weight parameter of `fn`: norm weights near 1, biases near 0, the embeddings and the
    projections ~ N(0, 1) / sqrt(fan-in), so the logits are O(1) and the loss is not flat."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in fn.params:
        if param.type.dtype.is_int:
            continue
        shape = tuple(int(d) for d in param.type.shape)
        if param.name.startswith("ln"):
            centre = 1.0 if param.name.endswith("_w") else 0.0
            value = centre + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[-1 if param.name == "wte" else 0])
        arrays.append(value.astype(np.float32))
    return arrays


def inputs(fn, seed: int = 0) -> tuple[np.ndarray, ...]:
    """The example's fixed batch and targets, then the weights."""
    c = constants()
    return (c["TOKENS"], c["TARGETS"], *weights(fn, seed))
