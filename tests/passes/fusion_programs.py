# ruff: noqa: F821
# Dtype names in Tensor[...] are strings that ruff reads as forward references.
"""DSL programs for the fusion golden tests: one per required pattern or barrier (SFEP §3.5, §8)."""

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func, tile
from tilefoundry.ir.types.shard import make_mesh

TP = make_mesh((4,), ("tp",))


@func
def elementwise_chain(x: Tensor[(8, 16), "f32"], y: Tensor[(8, 16), "f32"]):
    return tf.exp(x * y + y) - x


@func
def second_consumer(x: Tensor[(8, 16), "f32"]):
    shared = tf.exp(x)
    return tf.reduce(shared, axes=(1,), keepdim=True, kind="sum"), shared * 2.0


@func
def elementwise_into_reduction(x: Tensor[(8, 16), "f32"], b: Tensor[(16,), "f32"]):
    return tf.reduce(tf.exp(x - b) * x, axes=(1,), keepdim=False, kind="max")


@func
def elementwise_into_matmul(x: Tensor[(8, 16), "f32"], w: Tensor[(16, 4), "f32"]):
    return tf.matmul(tf.tanh(x) * 0.5, w)


@func
def reduction_into_reduction(x: Tensor[(8, 16), "f32"]):
    rows = tf.reduce(tf.exp(x), axes=(1,), keepdim=False, kind="sum")
    return tf.reduce(rows, axes=(0,), keepdim=False, kind="max")


@func
def matmul_into_reduction(x: Tensor[(8, 16), "f32"], w: Tensor[(16, 4), "f32"]):
    return tf.reduce(tf.matmul(x, w), axes=(1,), keepdim=True, kind="sum")


@func
def reshard_barrier(x: Tensor[(8, 32), "f32"]):
    y = tf.exp(x) + 1.0
    moved = tf.reshard(y, layout=(8, 32 @ TP.tp), storage="gmem")
    return tf.relu(moved)


@func
def parameter_producer(x: Tensor[(8,), "f32"]):
    return tf.exp(x) + x


@func
def transpose_not_view_like(x: Tensor[(16, 8), "f32"]):
    return tf.reduce(tf.transpose(tf.exp(x), (1, 0)), axes=(1,), keepdim=False, kind="sum")


@func
def transpose_reshape_into_reduction(x: Tensor[(16, 8), "f32"]):
    """A transpose read through a reshape by a reduction still feeds the reduction."""
    flat = tf.reshape(tf.transpose(tf.exp(x), (1, 0)), (128,))
    return tf.reduce(flat, axes=(0,), keepdim=False, kind="sum")


@func
def transpose_into_matmul(x: Tensor[(16, 8), "f32"], w: Tensor[(16, 4), "f32"]):
    """A transposed operand is a contraction's operand prologue (a dot reads it by index map)."""
    return tf.matmul(tf.transpose(tf.exp(x), (1, 0)), w)


@func
def matmul_epilogue(x: Tensor[(8, 16), "f32"], w: Tensor[(16, 4), "f32"], r: Tensor[(8, 4), "f32"]):
    """A residual add and its activation read the matmul's result in the matmul's region."""
    return tf.relu(r + tf.matmul(x, w))


@func
def reduction_epilogue(x: Tensor[(8, 16), "f32"]):
    """softmax's normalisation: the division reads the row sum inside the sum's region."""
    e = tf.exp(x)
    return e / tf.reduce(e, axes=(1,), keepdim=True, kind="sum")


@func
def transpose_view_like(x: Tensor[(16, 8), "f32"], y: Tensor[(8, 16), "f32"]):
    return tf.exp(tf.transpose(x, (1, 0))) + y


@func
def transformer_block(
    x: Tensor[(8, 32), "f32"],
    norm_w: Tensor[(32,), "f32"],
    wq: Tensor[(32, 32), "f32"],
    wk: Tensor[(32, 32), "f32"],
    wv: Tensor[(32, 32), "f32"],
    wo: Tensor[(32, 32), "f32"],
    w_gate: Tensor[(32, 64), "f32"],
    w_up: Tensor[(32, 64), "f32"],
    w_down: Tensor[(64, 32), "f32"],
):
    h = tf.rms_norm(x, norm_w, eps=1e-6)
    q = h @ wq
    k = h @ wk
    v = h @ wv
    scores = q @ tf.transpose(k, (1, 0)) * 0.125
    attn = tf.softmax(scores, axis=-1) @ v
    x1 = x + attn @ wo
    h2 = tf.rms_norm(x1, norm_w, eps=1e-6)
    gated = tf.silu(h2 @ w_gate) * (h2 @ w_up)
    return x1 + gated @ w_down


@func
def loop_body(x: Tensor[(8, 64), "f32"], bias: Tensor[(8, 1), "f32"]):
    """DESIGN §6: a loop body fuses by the ordinary rules, and never with ops outside it
    (`shifted` is loop-invariant: it stays outside the loop's regions)."""
    shifted = tf.exp(bias) * 2.0
    total = tf.zeros((8, 1), "f32")
    for j in tile(64, 16):
        window = x[:, j] - shifted
        total = total + tf.reduce(tf.exp(window) * 0.5, axes=(1,), keepdim=True, kind="sum")
    return total


CASES = [
    elementwise_chain,
    second_consumer,
    elementwise_into_reduction,
    elementwise_into_matmul,
    reduction_into_reduction,
    matmul_into_reduction,
    reshard_barrier,
    parameter_producer,
    transpose_not_view_like,
    transpose_view_like,
    transpose_into_matmul,
    matmul_epilogue,
    reduction_epilogue,
    transformer_block,
    loop_body,
]
