"""An independent float64 numpy Llama decoder layer: the oracle of tests/llama_layer.

Written from the model's definition (HF `LlamaDecoderLayer`), not from tilefoundry's kernels:
RMSNorm `x / sqrt(mean(x^2) + eps) * w`; rotate-half RoPE `x * cos[p] + rotate_half(x) * sin[p]`
with `rotate_half(x) = concat(-x[d/2:], x[:d/2])`; causal softmax attention over heads of width
hidden / heads; SwiGLU `(silu(g @ w_gate) * (g @ w_up)) @ w_down`. Every input is promoted to
float64 first, so the only rounding the tests tolerate is the f32 program's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WEIGHT_NAMES = (
    "attn_norm",
    "wq",
    "wk",
    "wv",
    "wo",
    "mlp_norm",
    "w_gate",
    "w_up",
    "w_down",
)
"""The per-layer weights, in the parameter order of examples/llama.py after the activations."""


@dataclass(frozen=True)
class Config:
    batch: int
    seq: int
    hidden: int
    heads: int
    ffn: int
    eps: float
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    shifted = np.exp(x - x.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def rotary(x: np.ndarray, positions: np.ndarray, config: Config) -> np.ndarray:
    """RoPE of `x` [.., seq, head_dim] at integer `positions` [seq], angles computed in f64."""
    half = config.head_dim // 2
    inv_freq = config.rope_base ** (-np.arange(half, dtype=np.float64) * 2 / config.head_dim)
    angles = np.outer(positions.astype(np.float64), inv_freq)
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def split_heads(x: np.ndarray, config: Config) -> np.ndarray:
    """[batch, seq, hidden] -> [batch, heads, seq, head_dim]."""
    batch, seq, _ = x.shape
    return x.reshape(batch, seq, config.heads, config.head_dim).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    batch, heads, seq, head_dim = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_dim)


def mlp_block(x: np.ndarray, w: dict[str, np.ndarray], config: Config) -> np.ndarray:
    g = rms_norm(x, w["mlp_norm"], config.eps)
    return x + (silu(g @ w["w_gate"]) * (g @ w["w_up"])) @ w["w_down"]


def layer(x: np.ndarray, w: dict[str, np.ndarray], config: Config) -> np.ndarray:
    """One decoder layer over a whole sequence (prefill), causal attention."""
    x = np.asarray(x, np.float64)
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    h = rms_norm(x, w["attn_norm"], config.eps)
    positions = np.arange(x.shape[1])
    q = rotary(split_heads(h @ w["wq"], config), positions, config)
    k = rotary(split_heads(h @ w["wk"], config), positions, config)
    v = split_heads(h @ w["wv"], config)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(config.head_dim)
    future = np.triu(np.ones((x.shape[1], x.shape[1]), dtype=bool), k=1)
    attended = softmax(np.where(future, -np.inf, scores)) @ v
    x = x + merge_heads(attended) @ w["wo"]
    return mlp_block(x, w, config)


def stack(x: np.ndarray, stacked: dict[str, np.ndarray], config: Config) -> np.ndarray:
    """`layer` applied once per leading index of the stacked weights."""
    for index in range(len(stacked["wq"])):
        x = layer(x, {k: v[index] for k, v in stacked.items()}, config)
    return x


def decode(
    x: np.ndarray,
    pos: int,
    k_cache: np.ndarray,
    v_cache: np.ndarray,
    w: dict[str, np.ndarray],
    config: Config,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One new token `x` [batch, 1, hidden] at position `pos`: its rotated key and its value are
    written into the caches [batch, max_len, heads, head_dim], and it attends to positions
    0..pos. Returns (output, new k_cache, new v_cache)."""
    x = np.asarray(x, np.float64)
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    k_cache, v_cache = (np.array(c, np.float64) for c in (k_cache, v_cache))
    h = rms_norm(x, w["attn_norm"], config.eps)
    at = np.array([pos])
    q = rotary(split_heads(h @ w["wq"], config), at, config)
    k = rotary(split_heads(h @ w["wk"], config), at, config)
    k_cache[:, pos] = k[:, :, 0]
    v_cache[:, pos] = split_heads(h @ w["wv"], config)[:, :, 0]
    keys = k_cache[:, : pos + 1].transpose(0, 2, 3, 1)  # [batch, heads, head_dim, pos + 1]
    values = v_cache[:, : pos + 1].transpose(0, 2, 1, 3)  # [batch, heads, pos + 1, head_dim]
    attended = softmax(q @ keys / np.sqrt(config.head_dim)) @ values
    x = x + merge_heads(attended) @ w["wo"]
    return mlp_block(x, w, config), k_cache, v_cache
