# ruff: noqa: F821
# Dtype names in Tensor[...] are strings that ruff reads as forward references.
"""Sharded programs for the SPMD exit, each next to its unsharded twin (same formula, no mesh).

`PROGRAMS[name]` is a `Program`: the sharded Function, its unsharded twin, how many devices it
runs on, and the collectives (kind, IR op) its Reshards and complete reductions must emit, in
emission order. The twins are what "matches the unsharded evaluation" compares against.
"""

from dataclasses import dataclass

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

MESH = make_mesh((2, 4), ("x", "y"))
DP = make_mesh((8,), ("dp",))
TP = make_mesh((8,), ("tp",))
UNNAMED = make_mesh((2, 4))
REPLICATED_TP = ShardLayout(Layout((8, 32)), (B,), TP)
REPLICATED_MESH = ShardLayout(Layout((16, 8)), (B, B), MESH)


@dataclass(frozen=True)
class Program:
    sharded: Function
    plain: Function
    devices: int
    collectives: tuple[tuple[str, str], ...]


# ---- data-parallel MLP: batch split, weights replicated, no communication -------------------


@func
def dp_mlp(
    x: Tensor[(16 @ DP.dp, 32), "f32"], w1: Tensor[(32, 64), "f32"], w2: Tensor[(64, 8), "f32"]
):
    return tf.relu(x @ w1) @ w2


@func
def dp_mlp_plain(
    x: Tensor[(16, 32), "f32"], w1: Tensor[(32, 64), "f32"], w2: Tensor[(64, 8), "f32"]
):
    return tf.relu(x @ w1) @ w2


# ---- Megatron MLP: column-parallel then row-parallel, one all-reduce of the output -----------


@func
def megatron_mlp(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(32, 64 @ TP.tp), "f32"],
    w2: Tensor[(64 @ TP.tp, 32), "f32"],
):
    partial = tf.gelu(x @ w1) @ w2
    return tf.reshard(partial, layout=REPLICATED_TP, storage="gmem")


@func
def megatron_mlp_plain(
    x: Tensor[(8, 32), "f32"], w1: Tensor[(32, 64), "f32"], w2: Tensor[(64, 32), "f32"]
):
    return tf.gelu(x @ w1) @ w2


# ---- the same MLP with the exact GELU, 0.5 x (1 + erf(x / sqrt 2)): CHLO's erf inside the
# manual computation, on each device's block of columns ------------------------------------


@func
def exact_gelu_megatron_mlp(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(32, 64 @ TP.tp), "f32"],
    w2: Tensor[(64 @ TP.tp, 32), "f32"],
):
    h = x @ w1
    partial = (0.5 * h * (1.0 + tf.erf(h * 0.7071067811865476))) @ w2
    return tf.reshard(partial, layout=REPLICATED_TP, storage="gmem")


@func
def exact_gelu_megatron_mlp_plain(
    x: Tensor[(8, 32), "f32"], w1: Tensor[(32, 64), "f32"], w2: Tensor[(64, 32), "f32"]
):
    h = x @ w1
    return (0.5 * h * (1.0 + tf.erf(h * 0.7071067811865476))) @ w2


# ---- sequence-split RMSNorm, then the sequence gathered back --------------------------------


@func
def sequence_rms_norm(x: Tensor[(16 @ DP.dp, 64), "f32"], weight: Tensor[(64,), "f32"]):
    y = tf.rms_norm(x, weight, eps=1e-5)
    return tf.reshard(y, layout=(16, 64 @ DP.dp), storage="gmem"), y


@func
def sequence_rms_norm_plain(x: Tensor[(16, 64), "f32"], weight: Tensor[(64,), "f32"]):
    y = tf.rms_norm(x, weight, eps=1e-5)
    return y, y


# ---- head-split attention: heads over both mesh axes, no communication -----------------------


@func
def head_split_attention(
    q: Tensor[(8 @ (MESH.x * MESH.y), 4, 16), "f32"],
    k: Tensor[(8 @ (MESH.x * MESH.y), 4, 16), "f32"],
    v: Tensor[(8 @ (MESH.x * MESH.y), 4, 16), "f32"],
):
    scores = q @ tf.transpose(k, (0, 2, 1)) * 0.25
    return tf.softmax(scores, axis=-1) @ v


@func
def head_split_attention_plain(
    q: Tensor[(8, 4, 16), "f32"], k: Tensor[(8, 4, 16), "f32"], v: Tensor[(8, 4, 16), "f32"]
):
    scores = q @ tf.transpose(k, (0, 2, 1)) * 0.25
    return tf.softmax(scores, axis=-1) @ v


# ---- 2-D mesh: rows Split on one axis, the contraction Partial on the other ------------------


@func
def split_x_partial_y(
    x: Tensor[(8 @ MESH.x, 16 @ MESH.y), "f32"], w: Tensor[(16 @ MESH.y, 12), "f32"]
):
    return tf.reshard(x @ w, layout=(8 @ MESH.x, 12), storage="gmem")


@func
def split_y_partial_x(
    x: Tensor[(8 @ MESH.y, 16 @ MESH.x), "f32"], w: Tensor[(16 @ MESH.x, 12), "f32"]
):
    h = tf.reshard(x @ w, layout=(8 @ MESH.y, 12), storage="gmem")
    return tf.tanh(h)


@func
def matmul_plain(x: Tensor[(8, 16), "f32"], w: Tensor[(16, 12), "f32"]):
    return x @ w


@func
def tanh_matmul_plain(x: Tensor[(8, 16), "f32"], w: Tensor[(16, 12), "f32"]):
    return tf.tanh(x @ w)


@func
def partial_to_split(
    x: Tensor[(8 @ MESH.x, 16 @ MESH.y), "f32"], w: Tensor[(16 @ MESH.y, 12), "f32"]
):
    return tf.reshard(x @ w, layout=(8 @ MESH.x, 12 @ MESH.y), storage="gmem")


# ---- all-gather of a 2-D split, Broadcast -> Split, all-to-all ------------------------------


@func
def gather_2d(x: Tensor[(16 @ MESH.x, 8 @ MESH.y), "f32"]):
    return tf.reshard(tf.exp(x), layout=REPLICATED_MESH, storage="gmem")


@func
def gather_two_axes(x: Tensor[(16 @ (MESH.x * MESH.y), 8), "f32"]):
    return tf.reshard(tf.exp(x), layout=REPLICATED_MESH, storage="gmem")


@func
def broadcast_to_split(x: Tensor[(16, 8), "f32"]):
    y = tf.reshard(x, layout=(16 @ (MESH.x * MESH.y), 8), storage="gmem")
    return tf.relu(y) + 1.0


@func
def split_swap(x: Tensor[(16 @ MESH.y, 8), "f32"]):
    y = tf.reshard(tf.exp(x), layout=(16, 8 @ MESH.y), storage="gmem")
    return y * 2.0


@func
def exp_plain(x: Tensor[(16, 8), "f32"]):
    return tf.exp(x)


@func
def relu_plus_one_plain(x: Tensor[(16, 8), "f32"]):
    return tf.relu(x) + 1.0


@func
def exp_twice_plain(x: Tensor[(16, 8), "f32"]):
    return tf.exp(x) * 2.0


# ---- reductions over a split axis (the complete effect) --------------------------------------


@func
def split_reductions(x: Tensor[(8, 32 @ MESH.y), "f32"]):
    total = tf.reduce(x, axes=(1,), keepdim=False, kind="sum")
    mean = tf.reduce(x, axes=(1,), keepdim=True, kind="mean")
    peak = tf.reduce(x, axes=(1,), keepdim=False, kind="abs_max")
    return total, mean, peak


@func
def split_reductions_plain(x: Tensor[(8, 32), "f32"]):
    total = tf.reduce(x, axes=(1,), keepdim=False, kind="sum")
    mean = tf.reduce(x, axes=(1,), keepdim=True, kind="mean")
    peak = tf.reduce(x, axes=(1,), keepdim=False, kind="abs_max")
    return total, mean, peak


@func
def dp_mean_square(x: Tensor[(16 @ UNNAMED.axes[0], 32 @ UNNAMED.axes[1]), "f32"]):
    return tf.reduce(x * x, axes=(0, 1), keepdim=False, kind="mean")


@func
def mean_square_plain(x: Tensor[(16, 32), "f32"]):
    return tf.reduce(x * x, axes=(0, 1), keepdim=False, kind="mean")


# ---- top-k per row of a row-split tensor: the selected axis is whole on every device ------------


@func
def sharded_topk(x: Tensor[(16 @ DP.dp, 8), "f32"]):
    values, _indices = tf.topk(x, 2)
    return values


@func
def topk_plain(x: Tensor[(16, 8), "f32"]):
    values, _indices = tf.topk(x, 2)
    return values


# ---- loops over stacked per-layer weights (issue 15 item 3) -----------------------------------
# A layer's weight is read with `tf.gather(w, l, axis=0)`: the loop variable is a rank-0 i64
# index (a subscript `w[l]` is refused: Slice takes static windows). The stacked weights are
# replicated and each layer's slice is cut to the device's block by a Reshard (a local slice).

LAYERS = 3
REPLICATED_8x32 = ShardLayout(Layout((8, 32)), (B,), TP)
REPLICATED_16x32 = ShardLayout(Layout((16, 32)), (B,), TP)


@func
def looped_megatron(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64), "f32"],
    w2: Tensor[(LAYERS, 64, 32), "f32"],
):
    h = tf.reshard(x, layout=REPLICATED_8x32, storage="gmem")
    for layer in range(LAYERS):
        a = tf.reshard(tf.gather(w1, layer, axis=0), layout=(32, 64 @ TP.tp), storage="gmem")
        b = tf.reshard(tf.gather(w2, layer, axis=0), layout=(64 @ TP.tp, 32), storage="gmem")
        h = tf.reshard(tf.gelu(h @ (a * 0.2)) @ (b * 0.1), layout=REPLICATED_8x32, storage="gmem")
    return h


@func
def looped_megatron_plain(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64), "f32"],
    w2: Tensor[(LAYERS, 64, 32), "f32"],
):
    h = x
    for layer in range(LAYERS):
        a = tf.gather(w1, layer, axis=0)
        b = tf.gather(w2, layer, axis=0)
        h = tf.gelu(h @ (a * 0.2)) @ (b * 0.1)
    return h


@func
def looped_sequence_parallel(
    x: Tensor[(16 @ TP.tp, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64), "f32"],
    w2: Tensor[(LAYERS, 64, 32), "f32"],
):
    for layer in range(LAYERS):
        full = tf.reshard(x, layout=REPLICATED_16x32, storage="gmem")
        a = tf.reshard(tf.gather(w1, layer, axis=0), layout=(32, 64 @ TP.tp), storage="gmem")
        b = tf.reshard(tf.gather(w2, layer, axis=0), layout=(64 @ TP.tp, 32), storage="gmem")
        y = tf.gelu(full @ (a * 0.2)) @ (b * 0.1)
        x = x + tf.reshard(y, layout=(16 @ TP.tp, 32), storage="gmem")
    return x


@func
def looped_sequence_parallel_plain(
    x: Tensor[(16, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64), "f32"],
    w2: Tensor[(LAYERS, 64, 32), "f32"],
):
    for layer in range(LAYERS):
        a = tf.gather(w1, layer, axis=0)
        b = tf.gather(w2, layer, axis=0)
        x = x + tf.gelu(x @ (a * 0.2)) @ (b * 0.1)
    return x


# ---- two views of the same 8 devices: tp=8 and (x=2, y=4) (issue 15 item 6) -------------------
# tp's device id is x * 4 + y, so a value moves between the views by the Reshard plan on their
# common refinement (x=2, y=4). A Partial crosses no view (typeinfer completes it on its own
# mesh first), so each view's reduce-scatter is its own and each move between views is an
# all-to-all of the y digit.


@func
def two_views(
    x: Tensor[(8, 16 @ TP.tp), "f32"],
    w: Tensor[(16 @ TP.tp, 12), "f32"],
    v: Tensor[(12 @ MESH.y, 4), "f32"],
):
    h = tf.reshard(x @ w, layout=(8 @ TP.tp, 12), storage="gmem")
    g = tf.reshard(h, layout=(8 @ MESH.x, 12 @ MESH.y), storage="gmem")
    q = tf.reshard(g @ v, layout=(8 @ MESH.x, 4 @ MESH.y), storage="gmem")
    return tf.reshard(q, layout=(8 @ TP.tp, 4), storage="gmem")


@func
def two_matmuls_plain(
    x: Tensor[(8, 16), "f32"], w: Tensor[(16, 12), "f32"], v: Tensor[(12, 4), "f32"]
):
    return (x @ w) @ v


@func
def views_round_trip(x: Tensor[(16 @ TP.tp, 8), "f32"]):
    y = tf.reshard(tf.exp(x), layout=(16 @ MESH.x, 8 @ MESH.y), storage="gmem")
    return tf.reshard(y * 2.0, layout=(16 @ TP.tp, 8), storage="gmem")


# ---- the natural L-layer stack: sharded stacked weights, Megatron residual ---------------------
# `tf.gather(w1, layer, axis=0)` of a (L, 32, 64 @ tp) stack is each layer's column-parallel
# weight (the Split is on a kept axis, so every device gathers its own block), and the residual
# `x + reshard(partial, Broadcast)` is plain. Running it needs the Gather SPMD rule and the
# simulator's replicated-typed values (issue 15 items 1 and 2, other branches): see
# test_stacked_layers.py.


@func
def stacked_megatron(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64 @ TP.tp), "f32"],
    w2: Tensor[(LAYERS, 64 @ TP.tp, 32), "f32"],
):
    for layer in range(LAYERS):
        a = tf.gather(w1, layer, axis=0)
        b = tf.gather(w2, layer, axis=0)
        partial = tf.gelu(x @ a) @ b
        x = x + tf.reshard(partial, layout=REPLICATED_8x32, storage="gmem")
    return x


@func
def stacked_megatron_plain(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(LAYERS, 32, 64), "f32"],
    w2: Tensor[(LAYERS, 64, 32), "f32"],
):
    for layer in range(LAYERS):
        a = tf.gather(w1, layer, axis=0)
        b = tf.gather(w2, layer, axis=0)
        x = x + tf.gelu(x @ a) @ b
    return x


PROGRAMS = {
    "dp_mlp": Program(dp_mlp, dp_mlp_plain, 8, ()),
    "megatron_mlp": Program(megatron_mlp, megatron_mlp_plain, 8, (("all_reduce", "Reshard"),)),
    "exact_gelu_megatron_mlp": Program(
        exact_gelu_megatron_mlp, exact_gelu_megatron_mlp_plain, 8, (("all_reduce", "Reshard"),)
    ),
    "sequence_rms_norm": Program(
        sequence_rms_norm, sequence_rms_norm_plain, 8, (("all_to_all", "Reshard"),)
    ),
    "head_split_attention": Program(head_split_attention, head_split_attention_plain, 8, ()),
    "split_x_partial_y": Program(split_x_partial_y, matmul_plain, 8, (("all_reduce", "Reshard"),)),
    "split_y_partial_x": Program(
        split_y_partial_x, tanh_matmul_plain, 8, (("all_reduce", "Reshard"),)
    ),
    "gather_2d": Program(
        gather_2d, exp_plain, 8, (("all_gather", "Reshard"), ("all_gather", "Reshard"))
    ),
    "partial_to_split": Program(
        partial_to_split, matmul_plain, 8, (("reduce_scatter", "Reshard"),)
    ),
    "gather_two_axes": Program(gather_two_axes, exp_plain, 8, (("all_gather", "Reshard"),)),
    "broadcast_to_split": Program(broadcast_to_split, relu_plus_one_plain, 8, ()),
    "split_swap": Program(split_swap, exp_twice_plain, 8, (("all_to_all", "Reshard"),)),
    "split_reductions": Program(
        split_reductions,
        split_reductions_plain,
        8,
        (("all_reduce", "Reduce"), ("all_reduce", "Reduce"), ("all_reduce", "Reduce")),
    ),
    "dp_mean_square": Program(dp_mean_square, mean_square_plain, 8, (("all_reduce", "Reduce"),)),
    "sharded_topk": Program(sharded_topk, topk_plain, 8, ()),
    "two_views": Program(
        two_views,
        two_matmuls_plain,
        8,
        (("reduce_scatter", "Reshard"), ("all_to_all", "Reshard")) * 2,
    ),
    "views_round_trip": Program(
        views_round_trip, exp_twice_plain, 8, (("all_to_all", "Reshard"),) * 2
    ),
    "looped_megatron": Program(
        looped_megatron, looped_megatron_plain, 8, (("all_reduce", "Reshard"),) * LAYERS
    ),
    "looped_sequence_parallel": Program(
        looped_sequence_parallel,
        looped_sequence_parallel_plain,
        8,
        (("all_gather", "Reshard"), ("reduce_scatter", "Reshard")) * LAYERS,
    ),
}

STACKED = {
    "stacked_megatron": Program(
        stacked_megatron, stacked_megatron_plain, 8, (("all_reduce", "Reshard"),) * LAYERS
    ),
}
"""Programs that need the op rules of other branches (see above); not in PROGRAMS."""
