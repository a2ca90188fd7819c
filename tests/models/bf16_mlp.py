# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A bf16 tensor-parallel MLP whose row-parallel partial is all-reduced in f32 (issue 29).

Mixed precision as Megatron does it: weights and activations in bf16, and the pending sum of the
row-parallel projection widened to f32 before its all-reduce, so the reduction adds the addends
without rounding each partial sum back to bf16. `tf.cast` of a bf16 `Partial(sum)` to f32 is an
exact widening, so it keeps the pending sum (a narrowing cast would refuse it), and the Reshard
after it is the one all-reduce, in f32.
"""

import numpy as np

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
BATCH, MODEL, HIDDEN = 16, 64, 256
REPLICATED = ShardLayout(Layout((BATCH, MODEL)), (B,), TP)


@func
def bf16_mlp(
    x: Tensor[(BATCH, MODEL), "bf16"],
    w1: Tensor[(MODEL, HIDDEN @ TP.tp), "bf16"],
    w2: Tensor[(HIDDEN @ TP.tp, MODEL), "bf16"],
):
    partial = tf.gelu(x @ w1) @ w2
    return tf.reshard(tf.cast(partial, "f32"), layout=REPLICATED, storage="gmem")


def reference(x, w1, w2):
    """float64 numpy on the bf16 inputs' values (GELU's tanh form)."""
    x, w1, w2 = (a.astype(np.float64) for a in (x, w1, w2))
    h = x @ w1
    h = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (h + 0.044715 * h**3)))
    return h @ w2


def inputs(seed: int = 0) -> tuple[np.ndarray, ...]:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, MODEL))
    w1 = rng.standard_normal((MODEL, HIDDEN)) / np.sqrt(MODEL)
    w2 = rng.standard_normal((HIDDEN, MODEL)) / np.sqrt(HIDDEN)
    return tuple(a.astype(ml_dtypes.bfloat16) for a in (x, w1, w2))
