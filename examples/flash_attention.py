# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Flash-attention forward: query blocks over a `cta` mesh, a key/value tile loop, online softmax.

Each CTA of `CTAS` owns a block of query rows (`SEQ_Q @ CTAS.q`). The loop walks the keys and
values one tile at a time: `k[j]` / `v[j]` read tile j (DESIGN §4.14) of the replicated K and V,
which each CTA stages into its shared memory (`reshard(..., layout=TILE, storage="smem")`: a
storage change names its layout, hir Reshard); the scores of its query block against the tile
update the running row maximum `m`, the running softmax denominator `l` and the unnormalised
output `acc` (rescaled by `exp(m - m_new)` whenever the maximum grows).
The carries are split like the queries, so every CTA works on its own rows and nothing is
communicated. After the loop `acc / l` is `softmax(q k^T / sqrt(d)) v` for the CTA's rows.
"""

import math

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import Layout, make_mesh

CTAS = make_mesh((2,), ("q",), topology="cta")
SEQ_Q, SEQ_K, HEAD, TILE_K = 32, 64, 16, 16
SCALE = 1.0 / math.sqrt(HEAD)
LOWEST = -1e30  # below every score: exp(LOWEST - m) is exactly 0


# The query-row split over the CTAs, for the (SEQ_Q, width) values each CTA keeps per row.
BY_ROWS_HEAD = (SEQ_Q @ CTAS.q, HEAD)
BY_ROWS_TILE = (SEQ_Q @ CTAS.q, TILE_K)
BY_ROWS_ONE = (SEQ_Q @ CTAS.q, 1)
# One key/value tile, replicated: every CTA stages the whole tile.
TILE = Layout((TILE_K, HEAD))


@func
def flash_attention(
    q: Tensor[(SEQ_Q @ CTAS.q, HEAD), "f32"],
    k: Tensor[(SEQ_K, HEAD), "f32"],
    v: Tensor[(SEQ_K, HEAD), "f32"],
):
    q_block = tf.reshard(q * SCALE, layout=BY_ROWS_HEAD, storage="smem")
    rows = tf.reshard(tf.zeros((SEQ_Q, 1), "f32"), layout=BY_ROWS_ONE, storage="rmem")
    m = rows + LOWEST
    l = rows
    acc = tf.reshard(tf.zeros((SEQ_Q, HEAD), "f32"), layout=BY_ROWS_HEAD, storage="rmem")
    for j in tile(SEQ_K, TILE_K):
        k_tile = tf.reshard(k[j], layout=TILE, storage="smem")
        v_tile = tf.reshard(v[j], layout=TILE, storage="smem")
        scores = q_block @ tf.transpose(k_tile, (1, 0))
        scores = tf.reshard(scores, layout=BY_ROWS_TILE, storage="rmem")
        m_new = tf.maximum(m, tf.reduce(scores, axes=(1,), keepdim=True, kind="max"))
        p = tf.exp(scores - m_new)
        rescale = tf.exp(m - m_new)
        l = l * rescale + tf.reduce(p, axes=(1,), keepdim=True, kind="sum")
        pv = tf.reshard(p, layout=BY_ROWS_TILE, storage="smem") @ v_tile
        acc = acc * rescale + tf.reshard(pv, layout=BY_ROWS_HEAD, storage="rmem")
        m = m_new
    return tf.reshard(acc / l, layout=BY_ROWS_HEAD, storage="gmem")
