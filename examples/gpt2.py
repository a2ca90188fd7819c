# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A GPT-2 style block on 8 devices, Megatron-style: the vocabulary split over `tp` at both ends.

- Vocab-parallel embedding: `wte` is split by rows (each device holds 1/8 of the vocabulary), so
  `tf.gather(wte, tokens, axis=0)` is a masked local lookup (a device writes the rows it owns and
  zeros elsewhere): a pending `Partial(sum)` that one Reshard completes (an all-reduce).
- The block: pre-LayerNorm attention with q/k/v column-parallel (one head per device) and the
  output projection row-parallel, then the GELU MLP column- then row-parallel; each row-parallel
  projection is completed by one all-reduce before its bias and the residual.
- Tied LM head: `h @ transpose(wte)` gives logits split over the vocabulary, never gathered.
- Megatron's vocab-parallel cross-entropy: the row max and the sum of exponentials reduce over
  the split vocabulary (each an all-reduce of one number per token), and the target logit is a
  batched gather (`batch_dims=1`) over the split vocabulary: a masked local gather, so again a
  pending sum and one all-reduce of one number per token.

`gpt2_loss` takes the token ids and the next-token targets; the last function, `gpt2_batch`, runs
it on the fixed batch below, so `tilefoundry run examples/gpt2.py --backend xla --devices 8`
needs only the weights, which it draws.
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))

BATCH, SEQ, VOCAB, DIM, HEADS = 2, 8, 256, 64, 8
HEAD_DIM, FFN, TOKENS_IN_BATCH = DIM // HEADS, 4 * DIM, BATCH * SEQ
EPS = 1e-5

CAUSAL_MASK = np.triu(np.full((SEQ, SEQ), -1e9, dtype=np.float32), k=1)
SCALE = np.float32(1.0 / np.sqrt(HEAD_DIM))

_IDS = np.random.default_rng(2).integers(0, VOCAB, size=(BATCH, SEQ + 1)).astype(np.int32)
TOKENS = _IDS[:, :-1]
"""A fixed batch: each row's next tokens are its targets (teacher forcing)."""
TARGETS = _IDS[:, 1:].reshape(TOKENS_IN_BATCH, 1)

REPLICATED = ShardLayout(Layout((BATCH, SEQ, DIM)), (B,), TP)
ONE_PER_TOKEN = ShardLayout(Layout((TOKENS_IN_BATCH, 1)), (B,), TP)


@func
def heads(x: Tensor[(BATCH, SEQ, DIM @ TP.tp), "f32"]):
    """(batch, seq, dim) -> (batch, heads, seq, head_dim): the head split stays local."""
    return tf.transpose(tf.reshape(x, (BATCH, SEQ, HEADS, HEAD_DIM)), (0, 2, 1, 3))


@func
def gpt2_loss(
    tokens: Tensor[(BATCH, SEQ), "i32"],
    targets: Tensor[(TOKENS_IN_BATCH, 1), "i32"],
    wte: Tensor[(VOCAB @ TP.tp, DIM), "f32"],
    wpe: Tensor[(SEQ, DIM), "f32"],
    ln1_w: Tensor[(DIM,), "f32"],
    ln1_b: Tensor[(DIM,), "f32"],
    wq: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bq: Tensor[(DIM @ TP.tp,), "f32"],
    wk: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bk: Tensor[(DIM @ TP.tp,), "f32"],
    wv: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bv: Tensor[(DIM @ TP.tp,), "f32"],
    wo: Tensor[(DIM @ TP.tp, DIM), "f32"],
    bo: Tensor[(DIM,), "f32"],
    ln2_w: Tensor[(DIM,), "f32"],
    ln2_b: Tensor[(DIM,), "f32"],
    w_fc: Tensor[(DIM, FFN @ TP.tp), "f32"],
    b_fc: Tensor[(FFN @ TP.tp,), "f32"],
    w_proj: Tensor[(FFN @ TP.tp, DIM), "f32"],
    b_proj: Tensor[(DIM,), "f32"],
    lnf_w: Tensor[(DIM,), "f32"],
    lnf_b: Tensor[(DIM,), "f32"],
):
    embedded = tf.gather(wte, tokens, axis=0)  # Partial(sum): each device its own vocab rows
    x = tf.reshard(embedded, layout=REPLICATED, storage="gmem") + wpe
    h = tf.layer_norm(x, ln1_w, ln1_b, eps=EPS)
    q, k, v = heads(h @ wq + bq), heads(h @ wk + bk), heads(h @ wv + bv)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * SCALE + CAUSAL_MASK
    attended = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(attended, (0, 2, 1, 3)), (BATCH, SEQ, DIM))
    x = x + (tf.reshard(merged @ wo, layout=REPLICATED, storage="gmem") + bo)
    h = tf.layer_norm(x, ln2_w, ln2_b, eps=EPS)
    mlp = tf.gelu(h @ w_fc + b_fc) @ w_proj
    x = x + (tf.reshard(mlp, layout=REPLICATED, storage="gmem") + b_proj)
    h = tf.reshape(tf.layer_norm(x, lnf_w, lnf_b, eps=EPS), (TOKENS_IN_BATCH, DIM))
    logits = h @ tf.transpose(wte, (1, 0))  # (tokens, vocab), split over the vocabulary
    # Megatron's vocab-parallel cross-entropy: reductions over the split vocabulary all-reduce
    # one number per token, and the target logit is a masked local gather (a pending sum)
    shifted = logits - tf.reduce(logits, axes=(1,), keepdim=True, kind="max")
    sum_exp = tf.reduce(tf.exp(shifted), axes=(1,), keepdim=True, kind="sum")
    target = tf.gather(shifted, targets, axis=1, batch_dims=1)
    target = tf.reshard(target, layout=ONE_PER_TOKEN, storage="gmem")
    return tf.reduce(tf.log(sum_exp) - target, axes=(0, 1), keepdim=False, kind="mean")


@func
def gpt2_batch(
    wte: Tensor[(VOCAB @ TP.tp, DIM), "f32"],
    wpe: Tensor[(SEQ, DIM), "f32"],
    ln1_w: Tensor[(DIM,), "f32"],
    ln1_b: Tensor[(DIM,), "f32"],
    wq: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bq: Tensor[(DIM @ TP.tp,), "f32"],
    wk: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bk: Tensor[(DIM @ TP.tp,), "f32"],
    wv: Tensor[(DIM, DIM @ TP.tp), "f32"],
    bv: Tensor[(DIM @ TP.tp,), "f32"],
    wo: Tensor[(DIM @ TP.tp, DIM), "f32"],
    bo: Tensor[(DIM,), "f32"],
    ln2_w: Tensor[(DIM,), "f32"],
    ln2_b: Tensor[(DIM,), "f32"],
    w_fc: Tensor[(DIM, FFN @ TP.tp), "f32"],
    b_fc: Tensor[(FFN @ TP.tp,), "f32"],
    w_proj: Tensor[(FFN @ TP.tp, DIM), "f32"],
    b_proj: Tensor[(DIM,), "f32"],
    lnf_w: Tensor[(DIM,), "f32"],
    lnf_b: Tensor[(DIM,), "f32"],
):
    return gpt2_loss(
        TOKENS,
        TARGETS,
        wte,
        wpe,
        ln1_w,
        ln1_b,
        wq,
        bq,
        wk,
        bk,
        wv,
        bv,
        wo,
        bo,
        ln2_w,
        ln2_b,
        w_fc,
        b_fc,
        w_proj,
        b_proj,
        lnf_w,
        lnf_b,
    )
