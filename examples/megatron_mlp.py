# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Megatron-style tensor-parallel MLP on 8 devices: column-parallel then row-parallel.

`w1` is split by columns and `w2` by rows over the mesh axis `tp`, so the first matmul and the
GELU stay local, the second matmul leaves a pending `Partial(sum)` on `tp`, and the one Reshard
to a replicated layout is the all-reduce. The type checker refuses to read the partial sum
before that Reshard (try returning `partial` directly).
"""

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
BATCH, MODEL, HIDDEN = 16, 64, 256
REPLICATED = ShardLayout(Layout((BATCH, MODEL)), (B,), TP)


@func
def megatron_mlp(
    x: Tensor[(BATCH, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN @ TP.tp), "f32"],
    w2: Tensor[(HIDDEN @ TP.tp, MODEL), "f32"],
):
    h = tf.gelu(x @ w1)
    partial = h @ w2
    return tf.reshard(partial, layout=REPLICATED, storage="gmem")
