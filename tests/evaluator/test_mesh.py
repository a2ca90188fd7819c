"""Mesh simulation: every sharded program, run per device and gathered, equals plain numpy.

Expected values are computed with numpy on the global arrays, never by the evaluator. Ops whose
mesh execution needs a SHARDED_EVAL rule (Reshard, Local, Reduce, TupleGetItem) register it in
their own modules.
"""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from support.mesh_ops import ReduceWithoutCombiner
from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.evaluator import evaluate, run_op_on_devices, scatter
from tilefoundry.ir.core import Call, Tuple
from tilefoundry.ir.hir import make_grid_region
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.nn.activations import ReLU
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.nn.norms import RMSNorm
from tilefoundry.ir.hir.nn.softmax import SoftMax
from tilefoundry.ir.hir.sharding.local import Local
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.hir.tensor.reduce import Reduce, ReduceKind
from tilefoundry.ir.hir.tensor.transpose import Transpose
from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, Split, make_mesh

ADD = Binary(kind=BinaryKind.ADD)
MUL = Binary(kind=BinaryKind.MUL)
MESH = make_mesh((4,), ("x",))
MESH2 = make_mesh((2, 2), ("a", "b"))


def sh(shape, *attrs, mesh=MESH):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def plain(shape):
    return make_tensor_type(shape, f32)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def to(x, shape, *attrs, mesh=MESH):
    """reshard(x) to the canonical layout of `attrs` over `mesh`."""
    return call(Reshard(layout=sh(shape, *attrs, mesh=mesh).layout), x)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


# -- elementwise -----------------------------------------------------------------------------------


# DESIGN §4.12: a replicated input is sliced locally, never communicated, which is why
# `(8,) Split(0) + (4,8)` is legal
def test_split_vector_plus_replicated_matrix():
    f = function_of({"v": sh((8,), S(0)), "m": plain((4, 8))}, lambda v, m: call(ADD, v, m))
    v, m = rand(8), rand(4, 8, seed=1)
    close(evaluate(f, v, m), v + m)


def test_elementwise_both_split_on_the_same_axis():
    f = function_of({"a": sh((8, 4), S(0)), "b": sh((8, 4), S(0))}, lambda a, b: call(MUL, a, b))
    a, b = rand(8, 4), rand(8, 4, seed=1)
    close(evaluate(f, a, b), a * b)


def test_elementwise_split_and_broadcast_on_a_2d_mesh():
    f = function_of(
        {"a": sh((4, 6), S(0), B, mesh=MESH2), "b": sh((4, 6), B, B, mesh=MESH2)},
        lambda a, b: call(ADD, a, b),
    )
    a, b = rand(4, 6), rand(4, 6, seed=1)
    close(evaluate(f, a, b), a + b)


def test_two_mesh_axes_split_both_tensor_axes():
    f = function_of(
        {"a": sh((4, 6), S(0), S(1), mesh=MESH2), "b": plain((4, 6))},
        lambda a, b: call(ADD, a, b),
    )
    a, b = rand(4, 6), rand(4, 6, seed=1)
    close(evaluate(f, a, b), a + b)


def test_two_mesh_axes_split_one_tensor_axis():
    f = function_of(
        {"a": sh((8,), S(0), S(0), mesh=MESH2), "b": plain((3, 8))}, lambda a, b: call(ADD, a, b)
    )
    a, b = rand(8), rand(3, 8, seed=1)
    close(evaluate(f, a, b), a + b)


def test_relu_of_a_split_tensor():
    f = function_of({"a": sh((8, 3), S(0))}, lambda a: call(ReLU(), a))
    a = rand(8, 3)
    close(evaluate(f, a), np.maximum(a, 0))


# -- matmul ---------------------------------------------------------------------------------------


def test_matmul_m_split():
    f = function_of({"a": sh((8, 4), S(0)), "b": plain((4, 6))}, lambda a, b: call(MatMul(), a, b))
    a, b = rand(8, 4), rand(4, 6, seed=1)
    close(evaluate(f, a, b), a @ b)


def test_matmul_n_split():
    f = function_of({"a": plain((3, 4)), "b": sh((4, 8), S(1))}, lambda a, b: call(MatMul(), a, b))
    a, b = rand(3, 4), rand(4, 8, seed=1)
    close(evaluate(f, a, b), a @ b)


def test_matmul_k_split_on_both_sides_then_reshard_to_broadcast():
    f = function_of(
        {"a": sh((3, 8), S(1)), "b": sh((8, 5), S(0))},
        lambda a, b: to(call(MatMul(), a, b), (3, 5), B),
    )
    a, b = rand(3, 8), rand(8, 5, seed=1)
    assert isinstance(f.body.args[0].type.layout.attrs[0], P)
    close(evaluate(f, a, b), a @ b)


# DESIGN §4.12 and hir §1.3 nn MatMul: a K-split lhs times a replicated rhs is Partial(sum)
def test_k_split_lhs_times_replicated_rhs_is_partial():
    f = function_of({"a": sh((3, 8), S(1)), "b": plain((8, 5))}, lambda a, b: call(MatMul(), a, b))
    a, b = rand(3, 8), rand(8, 5, seed=1)
    with pytest.raises(EvalError, match=r"Partial\(sum\) on mesh axis 0 \('x'\)"):
        evaluate(f, a, b)
    close(evaluate(f, a, b, complete_partials=True), a @ b)


def test_megatron_mlp():
    def mlp(x, w1, w2):
        hidden = call(ReLU(), call(MatMul(), x, w1))
        return to(call(MatMul(), hidden, w2), (4, 8), B)

    f = function_of({"x": plain((4, 8)), "w1": sh((8, 16), S(1)), "w2": sh((16, 8), S(0))}, mlp)
    x, w1, w2 = rand(4, 8), rand(8, 16, seed=1), rand(16, 8, seed=2)
    close(evaluate(f, x, w1, w2), np.maximum(x @ w1, 0) @ w2)


# -- reductions ------------------------------------------------------------------------------------


# DESIGN §4.12: a Reduce over a Split axis declares a complete effect (Broadcast), so it
# all-reduces; hir §1.3 Reduce: split positions of reduced axes collapse to Broadcast
@pytest.mark.parametrize(
    ("kind", "reference"),
    [(ReduceKind.SUM, np.sum), (ReduceKind.MEAN, np.mean), (ReduceKind.MAX, np.max)],
)
def test_reduce_over_the_split_axis_all_reduces(kind, reference):
    f = function_of(
        {"a": sh((8, 3), S(0))}, lambda a: call(Reduce(axes=(0,), keepdim=False, kind=kind), a)
    )
    a = rand(8, 3)
    close(evaluate(f, a), reference(a, axis=0))


def test_reduce_abs_max_over_the_split_axis():
    f = function_of(
        {"a": sh((8, 3), S(0))},
        lambda a: call(Reduce(axes=(0,), keepdim=True, kind=ReduceKind.ABS_MAX), a),
    )
    a = rand(8, 3)
    close(evaluate(f, a), np.abs(a).max(axis=0, keepdims=True))


def test_reduce_over_an_unsplit_axis_keeps_the_split():
    f = function_of(
        {"a": sh((8, 6), S(0))},
        lambda a: call(Reduce(axes=(1,), keepdim=False, kind=ReduceKind.SUM), a),
    )
    a = rand(8, 6)
    assert isinstance(f.body.type.layout.attrs[0], Split)
    close(evaluate(f, a), a.sum(axis=1))


def test_complete_reduction_without_a_combiner_fails_closed():
    f = function_of(
        {"a": sh((8, 3), S(0))},
        lambda a: call(ReduceWithoutCombiner(axes=(0,), kind=ReduceKind.SUM), a),
    )
    with pytest.raises(UnsupportedError, match="names no combiner"):
        evaluate(f, rand(8, 3))


# -- layout changes ------------------------------------------------------------------------------


def test_transpose_of_a_split_tensor():
    f = function_of({"a": sh((8, 6), S(0))}, lambda a: call(Transpose(perm=(1, 0)), a))
    a = rand(8, 6)
    close(evaluate(f, a), a.T)


@pytest.mark.parametrize(
    ("source", "target"), [((S(0),), (B,)), ((B,), (S(1),)), ((S(0),), (S(1),))]
)
def test_reshard_moves_between_layouts(source, target):
    f = function_of({"a": sh((8, 4), *source)}, lambda a: to(a, (8, 4), *target))
    a = rand(8, 4)
    close(evaluate(f, a), a)


def test_partial_sum_parameter_scaled_then_completed():
    f = function_of(
        {"a": sh((4, 4), P("sum")), "w": plain((4, 4))}, lambda a, w: to(call(MUL, a, w), (4, 4), B)
    )
    a, w = rand(4, 4), rand(4, 4, seed=1)
    close(evaluate(f, a, w), a * w)


def test_partial_max_parameter_plus_replicated_is_completed_on_request():
    f = function_of({"a": sh((4, 4), P("max")), "b": plain((4, 4))}, lambda a, b: call(ADD, a, b))
    a, b = rand(4, 4), rand(4, 4, seed=1)
    close(evaluate(f, a, b, complete_partials=True), a + b)


def test_partial_parameter_addends_are_uneven():
    value = scatter(rand(4, 4), sh((4, 4), P("sum")), "test")
    shards = list(value.shards.values())
    assert not any(np.allclose(shards[0], s) for s in shards[1:])
    close(sum(shards), rand(4, 4))


# -- norms and attention ---------------------------------------------------------------------------


def test_rmsnorm_with_rows_split():
    f = function_of(
        {"x": sh((8, 16), S(0)), "w": plain((16,))}, lambda x, w: call(RMSNorm(eps=1e-6), x, w)
    )
    x, w = rand(8, 16), rand(16, seed=1)
    expected = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w
    close(evaluate(f, x, w), expected)


def test_attention_like_chain_with_query_rows_split():
    def attention(q, k, v):
        scores = call(MatMul(), q, call(Transpose(perm=(1, 0)), k))
        return call(MatMul(), call(SoftMax(axis=-1), scores), v)

    f = function_of({"q": sh((8, 16), S(0)), "k": plain((12, 16)), "v": plain((12, 16))}, attention)
    q, k, v = rand(8, 16), rand(12, 16, seed=1), rand(12, 16, seed=2)
    close(evaluate(f, q, k, v), softmax(q @ k.T) @ v)


# -- calls, loops, tuples, Local, fail-closed ---------------------------------------------------


def test_sharded_argument_flows_through_a_function_call():
    double = function_of({"x": plain((8, 4))}, lambda x: call(ADD, x, x), name="double")
    f = function_of({"a": sh((8, 4), S(0))}, lambda a: Call(double, (a,)))
    a = rand(8, 4)
    close(evaluate(f, a), 2 * a)


def test_loop_carrying_a_split_value():
    f = function_of(
        {"a": sh((8,), S(0)), "b": plain((8,))},
        lambda a, b: make_grid_region((a,), 3, lambda i, p: (p[0], (call(ADD, p[0], b),))),
    )
    a, b = rand(8), rand(8, seed=1)
    close(evaluate(f, a, b), a + 3 * b)


def test_tuple_of_sharded_values_projected():
    f = function_of(
        {"a": sh((8,), S(0)), "b": sh((8,), S(0))},
        lambda a, b: call(TupleGetItem(index=1), Tuple((call(ADD, a, b), call(MUL, a, b)))),
    )
    a, b = rand(8), rand(8, seed=1)
    close(evaluate(f, a, b), a * b)


def test_local_exposes_each_device_block():
    x_type = sh((8, 2), S(0))
    local = Local()
    out_type = typeinfer_call(local, x_type)
    x = rand(8, 2)
    shards = scatter(x, x_type, "test").shards
    per_device = run_op_on_devices(local, (x_type,), out_type, {c: (s,) for c, s in shards.items()})
    for (d,), block in per_device.items():
        np.testing.assert_array_equal(block, x[2 * d : 2 * d + 2])


def test_returning_a_device_local_value_fails_closed():
    f = function_of({"a": sh((8,), S(0))}, lambda a: call(Local(), a))
    with pytest.raises(UnsupportedError, match="differs across the devices"):
        evaluate(f, rand(8))


def test_a_split_on_an_inner_factor_is_simulated():
    """Shard-layout §7.2: Split(1) of Layout((2, 4)) puts the mesh coordinate into the inner
    factor, so device d holds the strided indices {d, 4 + d} of the axis; it is simulated
    (DESIGN §4.12), not refused."""
    inner = ShardLayout(Layout((2, 4), (4, 1)), (Split(1),), MESH)
    f = function_of({"a": make_tensor_type((8,), f32, layout=inner)}, lambda a: call(ADD, a, a))
    x = rand(8)
    np.testing.assert_array_equal(evaluate(f, x), x + x)


def test_run_op_on_devices_matches_the_block_math():
    a_type, b_type = sh((8, 4), S(0)), plain((4, 2))
    out_type = typeinfer_call(MatMul(), a_type, b_type)
    a, b = rand(8, 4), rand(4, 2, seed=1)
    shards = scatter(a, a_type, "test").shards
    per_device = run_op_on_devices(
        MatMul(), (a_type, b_type), out_type, {c: (s, b) for c, s in shards.items()}
    )
    for (d,), block in per_device.items():
        close(block, a[2 * d : 2 * d + 2] @ b)
