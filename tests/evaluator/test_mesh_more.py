"""Mesh simulation of the ops whose sharding needs a hand-written SHARDED_EVAL rule.

Gather, Concat/Stack, InsertSlice, CacheUpdate, Reshape, ShapeOf/Rank and RoPE each register
one in their own module. Every sharded program here runs per device, is gathered back, and must
equal plain numpy on the global arrays (never the evaluator's own unsharded run).
"""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.evaluator import evaluate, run_op, scatter
from tilefoundry.evaluator.validate import catalog_samples, validate
from tilefoundry.evaluator.validation_checks import Settings
from tilefoundry.ir.core import Constant, Tuple
from tilefoundry.ir.hir.nn.rope import RoPE
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.hir.tensor.cache_update import CacheUpdate
from tilefoundry.ir.hir.tensor.concat import Concat, Stack
from tilefoundry.ir.hir.tensor.gather import Gather
from tilefoundry.ir.hir.tensor.insert_slice import InsertSlice
from tilefoundry.ir.hir.tensor.reshape import Reshape
from tilefoundry.ir.hir.tensor.shape_of import Rank, ShapeOf
from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
from tilefoundry.ir.types import TupleType, f32, i32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh

MESH = make_mesh((4,), ("x",))
MESH2 = make_mesh((2, 2), ("a", "b"))
PAIR = make_mesh((2,), ("x",))


def sh(shape, *attrs, mesh=MESH, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def plain(shape, dtype=f32):
    return make_tensor_type(shape, dtype)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def replicate(x, shape, mesh=MESH):
    """reshard(x) to Broadcast on every mesh axis: completes a Partial, gathers a Split."""
    return call(Reshard(layout=sh(shape, *(B,) * mesh.rank, mesh=mesh).layout), x)


def layout_of(fn):
    return fn.body.args[0].type.layout.attrs


def close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


# -- Gather ---------------------------------------------------------------------------------------


def test_gather_on_the_split_axis_gives_partial_sum_addends():
    f = function_of(
        {"x": sh((8, 3), S(0)), "i": plain((5,), i32)},
        lambda x, i: replicate(call(Gather(axis=0), x, i), (5, 3)),
    )
    assert layout_of(f) == (P("sum"),)
    x, i = rand(8, 3), np.array([7, 0, 3, 3, 5], dtype=np.int32)
    close(evaluate(f, x, i), x[i])


def test_gather_on_the_split_axis_next_to_a_partial_max_on_a_2d_mesh():
    f = function_of(
        {"x": sh((8, 2), S(0), P("max"), mesh=MESH2), "i": plain((2, 3), i32)},
        lambda x, i: replicate(call(Gather(axis=0), x, i), (2, 3, 2), MESH2),
    )
    assert layout_of(f) == (P("sum"), P("max"))
    x, i = rand(8, 2), np.array([[1, 6, 2], [7, 7, 4]], dtype=np.int32)
    close(evaluate(f, x, i), x[i])


def test_gather_carries_a_split_of_another_axis_past_the_index_dims():
    f = function_of(
        {"x": sh((4, 6, 8), S(2)), "i": plain((2, 3), i32)},
        lambda x, i: call(Gather(axis=1), x, i),
    )
    x, i = rand(4, 6, 8), np.array([[5, 0, 1], [2, 2, 4]], dtype=np.int32)
    assert f.body.type.shape == (4, 2, 3, 8)
    close(evaluate(f, x, i), np.take(x, i, axis=1))


def test_gather_with_a_split_gathered_axis_still_refuses_an_out_of_range_index():
    f = function_of(
        {"x": sh((8, 3), S(0)), "i": plain((2,), i32)}, lambda x, i: call(Gather(axis=0), x, i)
    )
    with pytest.raises(EvalError, match="index 8 is out of range"):
        evaluate(f, rand(8, 3), np.array([1, 8], dtype=np.int32), complete_partials=True)


# -- Concat / Stack -----------------------------------------------------------------------------


def test_concat_of_a_split_and_a_replicated_operand_along_an_unsplit_axis():
    f = function_of(
        {"a": sh((3, 8), S(1)), "b": sh((5, 8), B)},
        lambda a, b: call(Concat(axis=0), Tuple((a, b))),
    )
    assert f.body.type.layout.attrs == (S(1),)
    a, b = rand(3, 8), rand(5, 8, seed=1)
    close(evaluate(f, a, b), np.concatenate([a, b], axis=0))


def test_concat_of_partial_sum_operands_joins_addends():
    f = function_of(
        {"a": sh((2, 4), P("sum")), "b": sh((3, 4), P("sum"))},
        lambda a, b: replicate(call(Concat(axis=0), Tuple((a, b))), (5, 4)),
    )
    a, b = rand(2, 4), rand(3, 4, seed=1)
    close(evaluate(f, a, b), np.concatenate([a, b], axis=0))


def test_stack_renumbers_the_split_on_a_2d_mesh():
    f = function_of(
        {"a": sh((4, 6), S(0), B, mesh=MESH2), "b": sh((4, 6), S(0), B, mesh=MESH2)},
        lambda a, b: call(Stack(axis=1), Tuple((a, b))),
    )
    a, b = rand(4, 6), rand(4, 6, seed=1)
    close(evaluate(f, a, b), np.stack([a, b], axis=1))


def test_stack_of_a_replicated_operand_next_to_a_split_one():
    f = function_of(
        {"a": sh((8, 3), B), "b": sh((8, 3), S(0))}, lambda a, b: call(Stack(), Tuple((a, b)))
    )
    assert f.body.type.layout.attrs == (S(1),)
    a, b = rand(8, 3), rand(8, 3, seed=1)
    close(evaluate(f, a, b), np.stack([a, b]))


def test_a_join_claimed_split_on_its_joined_axis_fails_closed():
    a_type = sh((4, 2), S(0))
    arg_types = (TupleType((a_type, a_type)),)
    out_type = sh((8, 2), S(0))
    shards = scatter(rand(4, 2), a_type, "test")
    with pytest.raises(UnsupportedError, match="not split the same way"):
        run_op(Concat(axis=0), arg_types, out_type, ((shards, shards),))


# -- InsertSlice / CacheUpdate ------------------------------------------------------------------


def test_insert_slice_with_dst_and_update_split_on_a_non_window_axis():
    f = function_of(
        {"dst": sh((6, 8), S(1)), "update": sh((2, 8), S(1))},
        lambda dst, update: call(InsertSlice(), dst, update, Tuple((Constant(3), Constant(0)))),
    )
    dst, update = rand(6, 8), rand(2, 8, seed=1)
    expected = dst.copy()
    expected[3:5] = update
    close(evaluate(f, dst, update), expected)


def test_insert_slice_of_partial_max_addends():
    f = function_of(
        {"dst": sh((6,), P("max")), "update": sh((2,), P("max"))},
        lambda dst, update: replicate(call(InsertSlice(), dst, update, Constant(1)), (6,)),
    )
    dst, update = rand(6), rand(2, seed=1)
    expected = dst.copy()
    expected[1:3] = update
    close(evaluate(f, dst, update), expected)


def test_cache_update_with_the_heads_axis_split_on_a_2d_mesh():
    f = function_of(
        {
            "cache": sh((2, 8, 4, 2), S(2), S(0), mesh=MESH2),
            "pos": plain((), i32),
            "s": plain((), i32),
            "new": sh((2, 3, 4, 2), S(2), S(0), mesh=MESH2),
        },
        lambda cache, pos, s, new: call(CacheUpdate(), cache, pos, s, new),
    )
    cache, new = rand(2, 8, 4, 2), rand(2, 3, 4, 2, seed=1)
    pos, s = np.array(4, dtype=np.int32), np.array(2, dtype=np.int32)
    expected = cache.copy()
    expected[:, 4:6] = new[:, :2]
    close(evaluate(f, cache, pos, s, new), expected)


def test_cache_update_with_a_split_length_axis_fails_closed():
    cache_type, new_type = sh((2, 8, 4, 2), S(1)), sh((2, 3, 4, 2), B)
    scalar = plain((), i32)
    arg_types = (cache_type, scalar, scalar, new_type)
    args = (
        scatter(rand(2, 8, 4, 2), cache_type, "test"),
        np.array(0, dtype=np.int32),
        np.array(1, dtype=np.int32),
        scatter(rand(2, 3, 4, 2), new_type, "test"),
    )
    with pytest.raises(UnsupportedError, match="split on axis 1"):
        run_op(CacheUpdate(), arg_types, cache_type, args)


# -- Reshape ------------------------------------------------------------------------------------


def test_reshape_flattening_a_split_leading_axis():
    f = function_of({"x": sh((8, 3), S(0))}, lambda x: call(Reshape(new_shape=(24,)), x))
    assert f.body.type.layout.attrs == (S(0),)
    x = rand(8, 3)
    close(evaluate(f, x), x.reshape(24))


def test_reshape_dividing_an_axis_split_over_two_mesh_axes():
    f = function_of(
        {"x": sh((3, 8), S(1), S(1), mesh=MESH2)},
        lambda x: call(Reshape(new_shape=(3, 2, 4)), x),
    )
    x = rand(3, 8)
    close(evaluate(f, x), x.reshape(3, 2, 4))


def test_reshape_of_a_partial_with_a_split_on_the_other_mesh_axis():
    f = function_of(
        {"x": sh((4, 8), P("sum"), S(0), mesh=MESH2)},
        lambda x: replicate(call(Reshape(new_shape=(32,)), x), (32,), MESH2),
    )
    x = rand(4, 8)
    close(evaluate(f, x), x.reshape(32))


def test_reshape_to_an_inner_factor_split_is_simulated():
    """Flattening (4, 8) Split on axis 1 puts the split on the inner factor of the flat axis
    (each device holds a strided set of it), which the simulation holds as it is. On warps: a
    device mesh refuses the merge when checked (hir/tensor/reshape module doc, issue 28)."""
    warps = make_mesh((4,), ("x",), topology="warp")
    f = function_of(
        {"x": sh((4, 8), S(1), mesh=warps)}, lambda x: call(Reshape(new_shape=(32,)), x)
    )
    x = rand(4, 8)
    np.testing.assert_array_equal(evaluate(f, x), x.reshape(32))


# -- ShapeOf / Rank -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attrs", [(S(0), S(1)), (P("sum"), S(1)), (P("max"), P("min")), (B, S(0))], ids=str
)
def test_shape_of_and_rank_see_the_global_shape(attrs):
    f = function_of(
        {"x": sh((4, 6), *attrs, mesh=MESH2)},
        lambda x: Tuple((call(ShapeOf(), x), call(Rank(), x))),
    )
    shape, rank = evaluate(f, rand(4, 6), complete_partials=True)
    np.testing.assert_array_equal(shape, np.array([4, 6], dtype=np.int64))
    assert np.asarray(rank).dtype == np.int64 and int(rank) == 2


# -- RoPE -----------------------------------------------------------------------------------------


def rope(x, cos_cache, sin_cache, pos):
    cos, sin = cos_cache[pos], sin_cache[pos]
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def rope_inputs():
    q, k = rand(2, 4, 8), rand(3, 4, 8, seed=1)
    cos, sin = rand(6, 8, seed=2), rand(6, 8, seed=3)
    return q, k, cos, sin, np.array([5, 0, 2, 2], dtype=np.int32)


def rope_program(q_type, k_type):
    params = {
        "q": q_type,
        "k": k_type,
        "cos": plain((6, 8)),
        "sin": plain((6, 8)),
        "pos": plain((4,), i32),
    }

    def build(q, k, cos, sin, pos):
        both = call(RoPE(), q, k, cos, sin, pos)
        return Tuple(tuple(call(TupleGetItem(index=i), both) for i in (0, 1)))

    return function_of(params, build)


def test_rope_with_a_partial_sum_q_branch_and_a_replicated_k_branch():
    f = rope_program(sh((2, 4, 8), P("sum")), sh((3, 4, 8), B))
    q, k, cos, sin, pos = rope_inputs()
    q_out, k_out = evaluate(f, q, k, cos, sin, pos, complete_partials=True)
    close(q_out, rope(q, cos, sin, pos))
    close(k_out, rope(k, cos, sin, pos))


def test_rope_with_q_heads_split_and_k_replicated():
    f = rope_program(sh((2, 4, 8), S(0), mesh=PAIR), sh((3, 4, 8), B, mesh=PAIR))
    q, k, cos, sin, pos = rope_inputs()
    q_out, k_out = evaluate(f, q, k, cos, sin, pos)
    close(q_out, rope(q, cos, sin, pos))
    close(k_out, rope(k, cos, sin, pos))


def test_rope_with_q_seq_split_leaves_the_replicated_k_branch_whole():
    f = rope_program(sh((2, 4, 8), S(1), mesh=PAIR), sh((3, 4, 8), B, mesh=PAIR))
    assert [field.layout.attrs for field in f.body.type.fields] == [(S(1),), (B,)]
    q, k, cos, sin, pos = rope_inputs()
    q_out, k_out = evaluate(f, q, k, cos, sin, pos)
    close(q_out, rope(q, cos, sin, pos))
    close(k_out, rope(k, cos, sin, pos))


def test_rope_with_q_heads_split_and_k_plain():
    """One branch on no mesh at all (k and the caches plain): it runs whole on the caller's
    mesh rather than failing to find one (the backward of a split-q RoPE builds such calls)."""
    f = rope_program(sh((2, 4, 8), S(0), mesh=PAIR), plain((3, 4, 8)))
    q, k, cos, sin, pos = rope_inputs()
    q_out, k_out = evaluate(f, q, k, cos, sin, pos)
    close(q_out, rope(q, cos, sin, pos))
    close(k_out, rope(k, cos, sin, pos))


# -- the validator --------------------------------------------------------------------------------

_RULED = ("Gather", "Concat", "Stack", "InsertSlice", "CacheUpdate", "Reshape", "ShapeOf", "Rank")


def test_the_validator_executes_every_accepted_combination_of_these_ops_soundly():
    """Every accepted combination runs, including the Reshape results whose Split lands on an
    inner factor of a logical axis (a strided share, DESIGN §4.12)."""
    samples, _ = catalog_samples()
    report = validate({name: samples[name] for name in _RULED}, Settings())
    assert report.unsound == []
    assert sum(report.tallies[name].accepted for name in _RULED) > 150
    assert report.not_executable == []
