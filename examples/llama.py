# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A Llama-style decoder layer, written the way model authors write it, in five shardings.

The layer: RMSNorm, q/k/v projections, the head split by `reshape` + `transpose`, rotary position
embedding (`tf.rope`), causal-masked softmax attention, the output projection and a residual;
RMSNorm, the SwiGLU MLP (`silu(g @ w_gate) * (g @ w_up)`, then `w_down`) and a residual.

The shardings (every one runs the same math; only the annotations and the Reshards differ):
- `llama_tp`: Megatron tensor parallelism on 8 devices. q/k/v/gate/up are split by columns (so
  each device holds one of the 8 heads and 1/8 of the MLP), o/down by rows; each of the two row
  projections leaves a pending `Partial(sum)`, and the one Reshard to a replicated layout before
  each residual is its all-reduce: 2 all-reduces per layer;
- `llama_dp_tp`: a 2 x 4 mesh, the batch split over `dp`, Megatron over `tp`;
- `llama_sp`: sequence-parallel TP: the residual stream and both norms are split by sequence;
  one all-gather before attention and one before the MLP, and each pending sum is completed
  straight into the sequence split (Partial(sum) -> Split(seq), a reduce-scatter);
- `llama_stack`: LAYERS TP layers as one loop over stacked per-layer weights (`w[layer]` reads
  the layer's slice of a stacked weight: a loop window, DESIGN §4.14);
- `llama_decode`: one decode step against a KV cache whose heads are split over `tp`
  (`tf.cache_update` writes the new key and value at `pos`; attention masks the positions after
  it).

`llama_tp` is the last @func, so `tilefoundry run examples/llama.py --backend xla --devices 8`
runs it.
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
DP_TP = make_mesh((2, 4), ("dp", "tp"))

BATCH, SEQ, HIDDEN, HEADS, FFN = 2, 8, 64, 8, 128
HEAD_DIM = HIDDEN // HEADS
LAYERS = 2
MAX_LEN = 16  # the KV cache length of the decode step
EPS = 1e-6

_INV_FREQ = 1.0 / (10000.0 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
_ANGLES = np.outer(np.arange(MAX_LEN), _INV_FREQ)
COS = np.cos(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
SIN = np.sin(np.concatenate([_ANGLES, _ANGLES], axis=1)).astype(np.float32)
POSITIONS = np.arange(SEQ, dtype=np.int32)
CACHE_POSITIONS = np.arange(MAX_LEN, dtype=np.int32)
CAUSAL_MASK = np.triu(np.full((SEQ, SEQ), -1e9, dtype=np.float32), k=1)
"""Added to the scores: 0 where a query may attend, -1e9 (exp underflows to 0) after it."""
MASKED = np.float32(-1e9)
SCALE = np.float32(1.0 / np.sqrt(HEAD_DIM))
ONE = np.int32(1)  # the decode step writes one position into the cache

# A replicated target is spelled as a ShardLayout (the annotation sugar has no "no split").
REPLICATED = ShardLayout(Layout((BATCH, SEQ, HIDDEN)), (B,), TP)
REPLICATED_DECODE = ShardLayout(Layout((BATCH, 1, HIDDEN)), (B,), TP)


@func
def llama_dp_tp(
    x: Tensor[(BATCH @ DP_TP.dp, SEQ, HIDDEN), "f32"],
    attn_norm: Tensor[(HIDDEN,), "f32"],
    wq: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wk: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wv: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wo: Tensor[(HIDDEN @ DP_TP.tp, HIDDEN), "f32"],
    mlp_norm: Tensor[(HIDDEN,), "f32"],
    w_gate: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_up: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_down: Tensor[(FFN @ DP_TP.tp, HIDDEN), "f32"],
):
    h = tf.rms_norm(x, attn_norm, eps=EPS)
    q = tf.transpose(tf.reshape(h @ wq, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(h @ wk, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    v = tf.transpose(tf.reshape(h @ wv, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, COS, SIN, POSITIONS)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
    attended = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, HIDDEN))
    x = x + tf.reshard(merged @ wo, layout=(BATCH @ DP_TP.dp, SEQ, HIDDEN), storage="gmem")
    g = tf.rms_norm(x, mlp_norm, eps=EPS)
    down = (tf.silu(g @ w_gate) * (g @ w_up)) @ w_down
    return x + tf.reshard(down, layout=(BATCH @ DP_TP.dp, SEQ, HIDDEN), storage="gmem")


@func
def llama_sp(
    x: Tensor[(BATCH, SEQ @ TP.tp, HIDDEN), "f32"],
    attn_norm: Tensor[(HIDDEN,), "f32"],
    wq: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wk: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wv: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wo: Tensor[(HIDDEN @ TP.tp, HIDDEN), "f32"],
    mlp_norm: Tensor[(HIDDEN,), "f32"],
    w_gate: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_up: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_down: Tensor[(FFN @ TP.tp, HIDDEN), "f32"],
):
    h = tf.reshard(tf.rms_norm(x, attn_norm, eps=EPS), layout=REPLICATED, storage="gmem")
    q = tf.transpose(tf.reshape(h @ wq, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(h @ wk, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    v = tf.transpose(tf.reshape(h @ wv, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, COS, SIN, POSITIONS)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
    attended = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, HIDDEN))
    x = x + tf.reshard(merged @ wo, layout=(BATCH, SEQ @ TP.tp, HIDDEN), storage="gmem")
    g = tf.reshard(tf.rms_norm(x, mlp_norm, eps=EPS), layout=REPLICATED, storage="gmem")
    down = (tf.silu(g @ w_gate) * (g @ w_up)) @ w_down
    return x + tf.reshard(down, layout=(BATCH, SEQ @ TP.tp, HIDDEN), storage="gmem")


@func
def llama_stack(
    x: Tensor[(BATCH, SEQ, HIDDEN), "f32"],
    attn_norms: Tensor[(LAYERS, HIDDEN), "f32"],
    wqs: Tensor[(LAYERS, HIDDEN, HIDDEN @ TP.tp), "f32"],
    wks: Tensor[(LAYERS, HIDDEN, HIDDEN @ TP.tp), "f32"],
    wvs: Tensor[(LAYERS, HIDDEN, HIDDEN @ TP.tp), "f32"],
    wos: Tensor[(LAYERS, HIDDEN @ TP.tp, HIDDEN), "f32"],
    mlp_norms: Tensor[(LAYERS, HIDDEN), "f32"],
    w_gates: Tensor[(LAYERS, HIDDEN, FFN @ TP.tp), "f32"],
    w_ups: Tensor[(LAYERS, HIDDEN, FFN @ TP.tp), "f32"],
    w_downs: Tensor[(LAYERS, FFN @ TP.tp, HIDDEN), "f32"],
):
    for layer in range(LAYERS):
        h = tf.rms_norm(x, attn_norms[layer], eps=EPS)
        q = h @ wqs[layer]
        k = h @ wks[layer]
        v = h @ wvs[layer]
        q = tf.transpose(tf.reshape(q, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
        k = tf.transpose(tf.reshape(k, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
        v = tf.transpose(tf.reshape(v, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
        q, k = tf.rope(q, k, COS, SIN, POSITIONS)
        scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
        attended = tf.softmax(scores, axis=-1) @ v
        merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, HIDDEN))
        out = merged @ wos[layer]
        x = x + tf.reshard(out, layout=REPLICATED, storage="gmem")
        g = tf.rms_norm(x, mlp_norms[layer], eps=EPS)
        gate = tf.silu(g @ w_gates[layer])
        down = (gate * (g @ w_ups[layer])) @ w_downs[layer]
        x = x + tf.reshard(down, layout=REPLICATED, storage="gmem")
    return x


@func
def llama_decode(
    x: Tensor[(BATCH, 1, HIDDEN), "f32"],
    pos: Tensor[(1,), "i32"],
    k_cache: Tensor[(BATCH, MAX_LEN, HEADS @ TP.tp, HEAD_DIM), "f32"],
    v_cache: Tensor[(BATCH, MAX_LEN, HEADS @ TP.tp, HEAD_DIM), "f32"],
    attn_norm: Tensor[(HIDDEN,), "f32"],
    wq: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wk: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wv: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wo: Tensor[(HIDDEN @ TP.tp, HIDDEN), "f32"],
    mlp_norm: Tensor[(HIDDEN,), "f32"],
    w_gate: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_up: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_down: Tensor[(FFN @ TP.tp, HIDDEN), "f32"],
):
    h = tf.rms_norm(x, attn_norm, eps=EPS)
    q = tf.transpose(tf.reshape(h @ wq, (BATCH, 1, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(h @ wk, (BATCH, 1, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, COS, SIN, pos)
    k_cache = tf.cache_update(k_cache, pos, ONE, tf.transpose(k, (0, 2, 1, 3)))
    v_cache = tf.cache_update(v_cache, pos, ONE, tf.reshape(h @ wv, (BATCH, 1, HEADS, HEAD_DIM)))
    keys = tf.transpose(k_cache, (0, 2, 3, 1))
    values = tf.transpose(v_cache, (0, 2, 1, 3))
    scores = q @ keys * SCALE
    scores = tf.where(tf.cmp_le(CACHE_POSITIONS, pos), scores, MASKED)
    attended = tf.softmax(scores, axis=-1) @ values
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, 1, HIDDEN))
    x = x + tf.reshard(merged @ wo, layout=REPLICATED_DECODE, storage="gmem")
    g = tf.rms_norm(x, mlp_norm, eps=EPS)
    down = (tf.silu(g @ w_gate) * (g @ w_up)) @ w_down
    return x + tf.reshard(down, layout=REPLICATED_DECODE, storage="gmem"), k_cache, v_cache


@func
def llama_tp(
    x: Tensor[(BATCH, SEQ, HIDDEN), "f32"],
    attn_norm: Tensor[(HIDDEN,), "f32"],
    wq: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wk: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wv: Tensor[(HIDDEN, HIDDEN @ TP.tp), "f32"],
    wo: Tensor[(HIDDEN @ TP.tp, HIDDEN), "f32"],
    mlp_norm: Tensor[(HIDDEN,), "f32"],
    w_gate: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_up: Tensor[(HIDDEN, FFN @ TP.tp), "f32"],
    w_down: Tensor[(FFN @ TP.tp, HIDDEN), "f32"],
):
    h = tf.rms_norm(x, attn_norm, eps=EPS)
    q = tf.transpose(tf.reshape(h @ wq, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(h @ wk, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    v = tf.transpose(tf.reshape(h @ wv, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, COS, SIN, POSITIONS)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
    attended = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, HIDDEN))
    x = x + tf.reshard(merged @ wo, layout=REPLICATED, storage="gmem")
    g = tf.rms_norm(x, mlp_norm, eps=EPS)
    down = (tf.silu(g @ w_gate) * (g @ w_up)) @ w_down
    return x + tf.reshard(down, layout=REPLICATED, storage="gmem")
