# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The gradient of a Megatron MLP on 8 devices: reverse mode over typed shardings.

`loss` is a column-parallel / row-parallel MLP (as in megatron_mlp.py, with ReLU) followed by a
mean squared error. `train_step = value_and_grad(loss, argnums=(0, 1, 2))` is an ordinary
Function whose backward half is typed by the same rules as the forward: the forward's all-reduce
transposes to no communication, the weight gradients come out split exactly as the weights are,
and the cotangent of the replicated input `x` is a pending `Partial(sum)` over `tp` (it contracts
`w1`'s split columns), so returning it with x's type takes one all-reduce: Megatron's "f"
operator, found by the types. `tilefoundry show examples/megatron_grad.py` prints both Reshards.
"""

from tilefoundry import Tensor, func, value_and_grad
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
BATCH, MODEL, HIDDEN = 16, 64, 256
REPLICATED = ShardLayout(Layout((BATCH, MODEL)), (B,), TP)


@func
def loss(
    x: Tensor[(BATCH, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN @ TP.tp), "f32"],
    w2: Tensor[(HIDDEN @ TP.tp, MODEL), "f32"],
    target: Tensor[(BATCH, MODEL), "f32"],
):
    h = tf.relu(x @ w1)
    out = tf.reshard(h @ w2, layout=REPLICATED, storage="gmem")
    error = out - target
    return tf.reduce(error * error, axes=(0, 1), keepdim=False, kind="mean")


train_step = value_and_grad(loss, argnums=(0, 1, 2))
