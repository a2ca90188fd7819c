# ruff: noqa: B007, F821, SIM108
# Dtype names in Tensor[...] are strings that ruff reads as forward references, class-body
# siblings resolve through the frontend's frame capture, and loop variables may go unused.
"""Valid DSL programs; each module-level Function or Module here has a golden printout."""

import numpy as np

from tilefoundry.dsl import tf
from tilefoundry.frontend import ConstTensor, Tensor, func, module, tile
from tilefoundry.ir.core import DimVarRangePat
from tilefoundry.ir.types import DimVar
from tilefoundry.ir.types.shard import B, Layout, Mesh, P, ShardLayout, Topology, make_mesh

MESH = make_mesh((2, 4), ("x", "y"))
TP = make_mesh((4,), ("tp",))
S = DimVar("S", 1, 129)
SCALE = np.float32(0.125)
BIAS = np.arange(4, dtype=np.float32)
REPLICATED_TP = ShardLayout(Layout((8, 32)), (B,), TP)


@func
def elementwise_chain(x: Tensor[(8, 16), "f32"], y: Tensor[(8, 16), "f32"]):
    a = x + y
    b = a * x - y / x
    c = tf.exp(-b)
    return tf.maximum(c, a)


@func
def shared_subexpression(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:
    s = tf.square(x)
    return s * s + s


@func
def comparisons_and_logic(x: Tensor[(8,), "f32"], y: Tensor[(8,), "f32"]):
    inside = (x > y) & (x <= 2.0)
    outside = ~inside | (x == y)
    return tf.where(outside, x, y)


@func
def integer_ops(a: Tensor[(8,), "i32"], b: Tensor[(8,), "i32"]):
    return a // b + a % b


@func
def unary_ops(x: Tensor[(8,), "f32"]):
    return tf.rsqrt(tf.abs(x) + 1.0) + tf.log(tf.exp(x)) + tf.round(tf.ceil(x))


@func
def float_rule_bf16(x: Tensor[(8,), "bf16"]):
    return x * 0.5 + 1.5


@func
def float_rule_scalar_on_left(x: Tensor[(8,), "f16"]):
    return 2.0 - x


@func
def int_scalar(x: Tensor[(8,), "i64"]):
    return x * 3 + 1


@func
def captured_constants(x: Tensor[(2, 4), "f32"]):
    return x * SCALE + BIAS


@func
def compile_time_arithmetic(x: Tensor[(8, 16), "f32"]):
    rows = 8
    half = rows // 2
    return tf.reshape(x, (half, rows * 4))


@func
def reductions(x: Tensor[(8, 16), "f32"]):
    total = tf.reduce(x, axes=(1,), keepdim=False, kind="sum")
    peak = tf.reduce(x, axes=(0, 1), kind="max")
    return total, peak


@func
def mean_center(x: Tensor[(8, 16), "f32"]):
    mean = tf.reduce(x, axes=(1,), keepdim=True, kind="mean")
    return x - mean


@func
def matmul_chain(
    x: Tensor[(8, 32), "f32"], w1: Tensor[(32, 64), "f32"], w2: Tensor[(64, 16), "f32"]
):
    h = tf.relu(x @ w1)
    return h @ w2


@func
def attention(
    q: Tensor[(2, 8, 16), "f32"], k: Tensor[(2, 8, 16), "f32"], v: Tensor[(2, 8, 16), "f32"]
):
    scores = q @ tf.transpose(k, (0, 2, 1)) * 0.25
    weights = tf.softmax(scores, axis=-1)
    return weights @ v


@func
def rms_norm_block(x: Tensor[(4, 64), "f32"], weight: Tensor[(64,), "f32"]):
    return tf.rms_norm(x, weight, eps=1e-5)


@func
def rms_norm_by_hand(x: Tensor[(4, 64), "f32"], weight: Tensor[(64,), "f32"]):
    ms = tf.reduce(x * x, axes=(1,), keepdim=True, kind="mean")
    return x * tf.rsqrt(ms + 1e-6) * weight


@func
def activations(x: Tensor[(8,), "f32"]):
    return tf.gelu(x) + tf.silu(x) + tf.sigmoid(x) + tf.tanh(x)


@func
def slicing(x: Tensor[(8, 16, 4), "f32"]):
    window = x[1:5, ::2]
    column = x[:, 3]
    last = x[-1, ..., 0]
    return window, column, last


@func
def casts(x: Tensor[(8,), "f32"]):
    half = tf.cast(x, "bf16")
    return tf.cast(half * 2.0, "f32")


@func
def tuple_returns(x: Tensor[(8,), "f32"], y: Tensor[(8,), "f32"]):
    return x + y, x - y, x * y


@func
def unpack_topk(x: Tensor[(4, 16), "f32"]):
    values, indices = tf.topk(x, 3, axis=-1)
    return values, indices


@func
def tiled_accumulate(x: Tensor[(8, 16), "f32"]) -> Tensor[(8, 16), "f32"]:
    acc = tf.zeros((8, 16), "f32")
    for i in tile(64, 16):
        acc = acc + x * tf.cast(i, "f32")
    return acc


@func
def multi_carry_loop(a: Tensor[(8,), "f32"], b: Tensor[(8,), "f32"]):
    x = a
    y = b
    for i in range(2, 10, 2):
        t = x + y
        y = x
        x = t
    return x, y


@func
def nested_loops(a: Tensor[(4, 4), "f32"]):
    total = a
    for i in range(3):
        for j in range(4):
            total = total + total * 0.5
        total = tf.tanh(total)
    return total


@func
def loop_invariant_hoisting(a: Tensor[(4,), "f32"], w: Tensor[(4,), "f32"]):
    acc = a
    for i in range(8):
        acc = acc + tf.exp(w)
    return acc


@func
def sharded_signature(x: Tensor[(16 @ MESH.x, 8), "f32"], w: Tensor[(8, 16 @ MESH.y), "f32"]):
    return x @ w


@func
def partial_signature(
    x: Tensor[(8, 16, {MESH.y @ P("sum")}), "f32"],
) -> Tensor[(8, 16), "f32"]:
    return tf.reshard(x, layout=(8, 16 @ MESH.x), storage="gmem")


@func
def multi_axis_split(x: Tensor[(16 @ (MESH.x * MESH.y), 4), "f32", "gmem"]):
    return tf.relu(x)


@func
def column_row_parallel_mlp(
    x: Tensor[(8, 32), "f32"],
    w1: Tensor[(32, 64 @ TP.tp), "f32"],
    w2: Tensor[(64 @ TP.tp, 32), "f32"],
):
    h = tf.gelu(x @ w1)
    partial = h @ w2
    return tf.reshard(partial, layout=REPLICATED_TP, storage="gmem")


@func
def body_layout_tuple_form(x: Tensor[(16, 8), "f32"]):
    return tf.reshard(x, layout=(16 @ (MESH.x, MESH.y), 8), storage="gmem")


@func
def const_and_storage(w: ConstTensor[(4,), "f32", "smem"], x: Tensor[(4,), "f32", "smem"]):
    return w + x


@func
def symbolic_shapes(x: Tensor[(S, 8), "f32"], w: Tensor[(8, 4), "f32"]):
    return tf.softmax(x @ w, axis=1)


@func
def static_if(x: Tensor[(8,), "f32"]):
    if BIAS.shape[0] == 4:
        y = x + 1.0
    else:
        y = x - 1.0
    return y


@func
def double(v: Tensor[(8,), "f32"]):
    return v + v


@func
def calls_between_functions(a: Tensor[(8,), "f32"], b: Tensor[(8,), "f32"]):
    return double(a) * double(b)


@func
def rows_double(v: Tensor[(16, 8), "f32"]):
    return v + v


@func
def sharded_call_sites(a: Tensor[(16 @ MESH.x, 8), "f32"], b: Tensor[(16 @ MESH.x, 8), "f32"]):
    return rows_double(a), rows_double(b), rows_double(a + b)


@module
class Dispatch:
    @func
    def scale(x: Tensor[(S,), "f32"]) -> Tensor[(S,), "f32"]:
        pass

    @scale.specialize(DimVarRangePat("S", 1, 64))
    def small(x: Tensor[(S,), "f32"]) -> Tensor[(S,), "f32"]:
        return x * 2.0

    @scale.specialize(DimVarRangePat("S", 64, 129))
    def large(x: Tensor[(S,), "f32"]) -> Tensor[(S,), "f32"]:
        return x + x

    @func
    def entry(x: Tensor[(S,), "f32"]):
        return scale(x)


@module(topologies=(Topology("cta", 4),))
class MeshScoped:
    @func
    def helper(x: Tensor[(16,), "f32"]):
        return tf.exp(x)

    @func
    def kernel(x: Tensor[(16,), "f32"]):
        with Mesh(topology="cta", layout=(4,), names=("w",)) as w:
            y = helper(x)
            z = tf.reshard(y, layout=(16 @ w.w,), storage="gmem")
        return z


@module
class SiblingCalls:
    @func
    def inner(x: Tensor[(4,), "f32"]):
        return x * x

    @func
    def outer(x: Tensor[(4,), "f32"], y: Tensor[(4,), "f32"]):
        return inner(x) + inner(y)
