# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""One pre-norm transformer block: RMSNorm, single-head attention with RoPE, a SiLU-gated MLP.

The rotary caches and position ids are ordinary numpy arrays captured as constants, so the only
runtime inputs are the activations and the weights. Run it with
`tilefoundry run examples/transformer_block.py` (add `--backend xla` to run it on XLA).
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

SEQ, MODEL, HIDDEN = 16, 64, 128
_INV_FREQ = 1.0 / (10000.0 ** (np.arange(0, MODEL, 2, dtype=np.float32) / MODEL))
_ANGLES = np.outer(np.arange(SEQ, dtype=np.float32), _INV_FREQ)
COS = np.cos(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
SIN = np.sin(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
POSITIONS = np.arange(SEQ, dtype=np.int32)
SCALE = np.float32(1.0 / np.sqrt(MODEL))


@func
def transformer_block(
    x: Tensor[(SEQ, MODEL), "f32"],
    norm1: Tensor[(MODEL,), "f32"],
    wq: Tensor[(MODEL, MODEL), "f32"],
    wk: Tensor[(MODEL, MODEL), "f32"],
    wv: Tensor[(MODEL, MODEL), "f32"],
    wo: Tensor[(MODEL, MODEL), "f32"],
    norm2: Tensor[(MODEL,), "f32"],
    w_gate: Tensor[(MODEL, HIDDEN), "f32"],
    w_up: Tensor[(MODEL, HIDDEN), "f32"],
    w_down: Tensor[(HIDDEN, MODEL), "f32"],
):
    h = tf.rms_norm(x, norm1, eps=1e-6)
    q, k = tf.rope(h @ wq, h @ wk, COS, SIN, POSITIONS)
    scores = q @ tf.transpose(k, (1, 0)) * SCALE
    attended = tf.softmax(scores, axis=-1) @ (h @ wv)
    x = x + attended @ wo
    g = tf.rms_norm(x, norm2, eps=1e-6)
    return x + (tf.silu(g @ w_gate) * (g @ w_up)) @ w_down
