# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A Mixtral-style mixture-of-experts layer with expert parallelism on 8 devices.

The tokens come in GROUPS groups, one per device (split over `ep`, as data parallelism leaves
them), and the 16 experts are split over `ep` too: each device holds 2. The layer, as Mixtral's
and GShard's authors write it:

- router: `softmax(x @ w_router)` over the experts, the top 2 per token (`tf.topk`), their
  weights renormalised to sum to 1 (Mixtral);
- dispatch with a capacity of CAPACITY tokens per expert and group (GShard): a token's slot in
  its expert is the number of earlier choices of that expert (an exclusive `tf.cumsum`; the
  first choices of every token go before the second ones), a choice past the capacity is
  dropped, and `tf.scatter_add` (`index_add` with a static shape) writes each kept token into
  its expert's slot. Every device routes its own group: nothing moves;
- the one Reshard from "split by group" to "split by expert" is an all-to-all (the types call
  for it: the experts a device holds need every group's tokens for them);
- the experts: `for e in range(EXPERTS_PER_DEVICE)` walks each device's own experts (`w1[e]` is
  the e-th expert of each device, so it keeps the device axis), Mixtral's SwiGLU
  `w2(silu(w1 x) * w3 x)`;
- the Reshard back is the second all-to-all, and the combine reads each choice's output with a
  batched `tf.gather` at its slot (each device its own group's slots) and sums the two choices
  weighted by the router (a dropped choice weighs 0).

`tilefoundry run examples/moe.py --backend xla --devices 8` runs it on 8 devices.
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

EP = make_mesh((8,), ("ep",))

GROUPS, TOKENS, HIDDEN, FFN = 8, 16, 32, 64
EXPERTS, TOP_K, CAPACITY = 16, 2, 4
EXPERTS_PER_DEVICE = EXPERTS // 8
CHOICES = TOP_K * TOKENS
"""A group's routing choices, first choices of every token first (they get capacity first)."""
EXPERT_IDS = np.arange(EXPERTS)


@func
def moe_layer(
    x: Tensor[(GROUPS @ EP.ep, TOKENS, HIDDEN), "f32"],
    w_router: Tensor[(HIDDEN, EXPERTS), "f32"],
    w1: Tensor[(EXPERTS @ EP.ep, HIDDEN, FFN), "f32"],
    w3: Tensor[(EXPERTS @ EP.ep, HIDDEN, FFN), "f32"],
    w2: Tensor[(EXPERTS @ EP.ep, FFN, HIDDEN), "f32"],
):
    # router: softmax over the experts, the top 2, renormalised (Mixtral)
    probs = tf.softmax(x @ w_router, axis=-1)
    top_p, top_i = tf.topk(probs, TOP_K)
    top_p = top_p / tf.reduce(top_p, axes=(2,), keepdim=True, kind="sum")
    choice = tf.reshape(tf.transpose(top_i, (0, 2, 1)), (GROUPS, CHOICES))
    weight = tf.reshape(tf.transpose(top_p, (0, 2, 1)), (GROUPS, CHOICES))
    # capacity: a choice's slot is the number of earlier choices of its expert (GShard)
    chosen = tf.cast(tf.cmp_eq(tf.reshape(choice, (GROUPS, CHOICES, 1)), EXPERT_IDS), "i64")
    earlier = tf.cumsum(chosen, axis=1) - chosen
    position = tf.reduce(earlier * chosen, axes=(2,), keepdim=False, kind="sum")
    kept = tf.cmp_lt(position, CAPACITY)
    slot = choice * CAPACITY + tf.minimum(position, CAPACITY - 1)
    weight = tf.where(kept, weight, 0.0)
    # dispatch: each kept choice's token added into its expert's slot, every group locally
    tokens = tf.broadcast_to(
        tf.reshape(x, (GROUPS, 1, TOKENS, HIDDEN)), (GROUPS, TOP_K, TOKENS, HIDDEN)
    )
    routed = tf.where(
        tf.reshape(kept, (GROUPS, CHOICES, 1)), tf.reshape(tokens, (GROUPS, CHOICES, HIDDEN)), 0.0
    )
    slots = tf.zeros((GROUPS, EXPERTS * CAPACITY, HIDDEN), "f32")
    dispatched = tf.scatter_add(slots, slot, routed, axis=1, batch_dims=1)
    by_group = tf.reshape(dispatched, (GROUPS, EXPERTS, CAPACITY, HIDDEN))
    by_expert = tf.reshard(
        by_group, layout=(GROUPS, EXPERTS @ EP.ep, CAPACITY, HIDDEN), storage="gmem"
    )
    expert_in = tf.reshape(
        tf.transpose(by_expert, (1, 0, 2, 3)), (EXPERTS, GROUPS * CAPACITY, HIDDEN)
    )
    # the experts: each device walks its own (w1[e] is the e-th expert of every device)
    expert_out = tf.reshard(
        tf.zeros((EXPERTS, GROUPS * CAPACITY, HIDDEN), "f32"),
        layout=(EXPERTS @ EP.ep, GROUPS * CAPACITY, HIDDEN),
        storage="gmem",
    )
    for e in range(EXPERTS_PER_DEVICE):
        h = expert_in[e]
        expert_out[e] = (tf.silu(h @ w1[e]) * (h @ w3[e])) @ w2[e]
    # combine: back to the groups, each choice's output read at its slot, weighted and summed
    back = tf.transpose(tf.reshape(expert_out, (EXPERTS, GROUPS, CAPACITY, HIDDEN)), (1, 0, 2, 3))
    back = tf.reshard(back, layout=(GROUPS @ EP.ep, EXPERTS, CAPACITY, HIDDEN), storage="gmem")
    outputs = tf.gather(
        tf.reshape(back, (GROUPS, EXPERTS * CAPACITY, HIDDEN)), slot, axis=1, batch_dims=1
    )
    weighted = outputs * tf.reshape(weight, (GROUPS, CHOICES, 1))
    return tf.reduce(
        tf.reshape(weighted, (GROUPS, TOP_K, TOKENS, HIDDEN)), axes=(1,), keepdim=False, kind="sum"
    )
