# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Hugging Face style grouped-query attention with more tensor-parallel devices than KV heads.

8 query heads split over `tp` (one per device) and 2 KV heads that cannot be split over 8
devices, so the key and value projections stay replicated: RoPE rotates a split query branch
beside a plain key branch (the simulator once crashed on that with a bare IndexError), and
`repeat_kv` (HF's `expand` + `reshape`) gives every query head its KV head, read locally.
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
BATCH, SEQ, HIDDEN, HEADS, KV_HEADS = 2, 8, 64, 8, 2
HEAD_DIM = HIDDEN // HEADS
GROUPS = HEADS // KV_HEADS
KV_DIM = KV_HEADS * HEAD_DIM

_INV_FREQ = 1.0 / (10000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
_ANGLES = np.outer(np.arange(SEQ), _INV_FREQ)
COS = np.cos(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
SIN = np.sin(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
POSITIONS = np.arange(SEQ, dtype=np.int32)
CAUSAL_MASK = np.triu(np.full((SEQ, SEQ), -1e9, dtype=np.float32), k=1)
SCALE = np.float32(1.0 / np.sqrt(HEAD_DIM))
REPLICATED = ShardLayout(Layout((BATCH, SEQ, HIDDEN)), (B,), TP)


@func
def repeat_kv(x: Tensor[(BATCH, KV_HEADS, SEQ, HEAD_DIM), "f32"]):
    """HF's repeat_kv: each KV head serves GROUPS consecutive query heads."""
    grouped = tf.reshape(x, (BATCH, KV_HEADS, 1, SEQ, HEAD_DIM))
    repeated = tf.broadcast_to(grouped, (BATCH, KV_HEADS, GROUPS, SEQ, HEAD_DIM))
    return tf.reshape(repeated, (BATCH, HEADS, SEQ, HEAD_DIM))


@func
def gqa_attention(
    x: Tensor[(BATCH, SEQ, HIDDEN), "f32"],
    wq: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wk: Tensor[(HIDDEN, KV_DIM), "f32"],
    wv: Tensor[(HIDDEN, KV_DIM), "f32"],
    wo: Tensor[(HIDDEN @ TP.tp, HIDDEN), "f32"],
):
    q = tf.transpose(tf.reshape(x @ wq, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(x @ wk, (BATCH, SEQ, KV_HEADS, HEAD_DIM)), (0, 2, 1, 3))
    v = tf.transpose(tf.reshape(x @ wv, (BATCH, SEQ, KV_HEADS, HEAD_DIM)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, COS, SIN, POSITIONS)
    k, v = repeat_kv(k), repeat_kv(v)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
    attended = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, HIDDEN))
    return tf.reshard(merged @ wo, layout=REPLICATED, storage="gmem")


def reference(x, wq, wk, wv, wo):
    """The same attention in float64 numpy (HF's modeling code, written out)."""
    x, wq, wk, wv, wo = (a.astype(np.float64) for a in (x, wq, wk, wv, wo))
    cos, sin = COS[POSITIONS].astype(np.float64), SIN[POSITIONS].astype(np.float64)
    half = HEAD_DIM // 2

    def heads(v, count):
        return v.reshape(BATCH, SEQ, count, HEAD_DIM).transpose(0, 2, 1, 3)

    def rope(v):
        return v * cos + np.concatenate([-v[..., half:], v[..., :half]], axis=-1) * sin

    q, k, v = rope(heads(x @ wq, HEADS)), rope(heads(x @ wk, KV_HEADS)), heads(x @ wv, KV_HEADS)
    k, v = np.repeat(k, GROUPS, axis=1), np.repeat(v, GROUPS, axis=1)
    scores = q @ k.transpose(0, 1, 3, 2) * float(SCALE) + CAUSAL_MASK
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    merged = (weights @ v).transpose(0, 2, 1, 3).reshape(BATCH, SEQ, HIDDEN)
    return merged @ wo


def inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    """Activations ~ N(0, 1), projections scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    shapes = ((BATCH, SEQ, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, KV_DIM), (HIDDEN, KV_DIM))
    shapes += ((HIDDEN, HIDDEN),)
    arrays = [rng.standard_normal(shapes[0])]
    arrays += [rng.standard_normal(s) / np.sqrt(s[0]) for s in shapes[1:]]
    return tuple(a.astype(np.float32) for a in arrays)
