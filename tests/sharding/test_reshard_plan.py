"""The Reshard plan, read off the two types alone: the collectives the SPMD exit emits and the
inspector describes (`show`, the report), so both are checked here once, on their own."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.inspect.shard_view import reshard_collectives
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.sharding import Reshard
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, Split, make_mesh
from tilefoundry.sharding.reshard_plan import (
    AllGather,
    AllReduce,
    AllToAll,
    ReduceScatter,
    Slice,
    plan_reshard,
)
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

TP = make_mesh((4,), ("tp",))
XY = make_mesh((2, 4), ("x", "y"))


def sh(shape, *attrs, mesh=TP):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def test_partial_to_broadcast_is_one_all_reduce():
    src, dst = sh((8, 16), P("sum")), sh((8, 16), B)
    assert plan_reshard(src, dst, "t") == [AllReduce((0,), "sum")]
    assert reshard_collectives(src, dst) == ["tp: all-reduce(sum)"]


def test_partial_to_split_is_one_reduce_scatter():
    """Issue 15 item 4: Partial(sum) -> Split is ONE reduce_scatter (each device receives 1/N
    of what an all-reduce gives it); the inspector says what the exit emits."""
    src, dst = sh((8, 16), P("sum")), sh((8, 16), S(1))
    assert plan_reshard(src, dst, "t") == [ReduceScatter(1, (0,), "sum")]
    assert reshard_collectives(src, dst) == ["tp: reduce-scatter(sum, dim 1)"]


def test_without_reduce_scatter_the_fallback_is_all_reduce_then_slice():
    """The plan of a backend without reduce_scatter (none of ours today)."""
    src, dst = sh((8, 16), P("sum")), sh((8, 16), S(1))
    plan = plan_reshard(src, dst, "t", reduce_scatter=False)
    assert plan == [AllReduce((0,), "sum"), Slice(((1, (0,)),))]


def test_a_reduce_scatter_over_two_axes_and_one_over_part_of_a_cut():
    """Blocks are numbered mixed-radix over the cut's mesh axes, outermost first: a scatter
    over a prefix of them, then a local slice over the rest, keeps that numbering."""
    src = sh((8, 16), P("sum"), P("sum"), mesh=XY)
    both = sh((8, 16), S(0), S(0), mesh=XY)
    assert plan_reshard(src, both, "t") == [ReduceScatter(0, (0, 1), "sum")]
    assert reshard_collectives(src, both) == ["x,y: reduce-scatter(sum, dim 0)"]
    partial_x = sh((8, 16), P("max"), B, mesh=XY)
    split_xy = sh((8, 16), S(0), S(0), mesh=XY)
    assert plan_reshard(partial_x, split_xy, "t") == [
        ReduceScatter(0, (0,), "max"),
        Slice(((0, (1,)),)),
    ]


def test_mixed_reductions_keep_their_order_and_do_not_scatter():
    """sum over x then max over y is not max over y then sum over x: with two reductions
    pending, the all-reduces stay first, in mesh-axis order, and the cut is a local slice."""
    src, dst = sh((8, 16), P("sum"), P("max"), mesh=XY), sh((8, 16), S(0), B, mesh=XY)
    assert plan_reshard(src, dst, "t") == [
        AllReduce((0,), "sum"),
        AllReduce((1,), "max"),
        Slice(((0, (0,)),)),
    ]


def test_split_to_broadcast_is_one_all_gather():
    src, dst = sh((8, 16), S(0)), sh((8, 16), B)
    assert plan_reshard(src, dst, "t") == [AllGather(0, (0,))]
    assert reshard_collectives(src, dst) == ["tp: all-gather(dim 0)"]


def test_broadcast_to_split_moves_no_data():
    src, dst = sh((8, 16), B), sh((8, 16), S(0))
    assert plan_reshard(src, dst, "t") == [Slice(((0, (0,)),))]
    assert reshard_collectives(src, dst) == ["tp: slice (local, no communication)"]


def test_a_plain_value_is_sliced_locally_too():
    src, dst = make_tensor_type((8, 16), f32), sh((8, 16), S(1))
    assert plan_reshard(src, dst, "t") == [Slice(((1, (0,)),))]


def test_split_moving_to_another_axis_is_one_all_to_all():
    src, dst = sh((8, 16), S(0)), sh((8, 16), S(1))
    assert plan_reshard(src, dst, "t") == [AllToAll(source=0, dest=1, mesh_axis=0)]
    assert reshard_collectives(src, dst) == ["tp: all-to-all(dim 0 -> dim 1)"]


def test_two_different_reductions_are_not_merged():
    """sum over x then max over y is not max then sum: one all-reduce per reduction."""
    src, dst = sh((8, 16), P("sum"), P("max"), mesh=XY), sh((8, 16), B, B, mesh=XY)
    assert plan_reshard(src, dst, "t") == [AllReduce((0,), "sum"), AllReduce((1,), "max")]
    assert reshard_collectives(src, dst) == ["x: all-reduce(sum)", "y: all-reduce(max)"]


def test_two_axes_with_one_reduction_merge_into_one_all_reduce():
    src, dst = sh((8, 16), P("sum"), P("sum"), mesh=XY), sh((8, 16), B, B, mesh=XY)
    assert plan_reshard(src, dst, "t") == [AllReduce((0, 1), "sum")]
    assert reshard_collectives(src, dst) == ["x,y: all-reduce(sum)"]


def test_a_partial_kept_whole_is_all_reduced_and_the_other_scattered():
    src, dst = sh((8, 16), P("sum"), P("sum"), mesh=XY), sh((8, 16), B, S(0), mesh=XY)
    assert plan_reshard(src, dst, "t") == [AllReduce((0,), "sum"), ReduceScatter(0, (1,), "sum")]
    assert reshard_collectives(src, dst) == ["x: all-reduce(sum)", "y: reduce-scatter(sum, dim 0)"]


def test_a_kept_partial_and_a_kept_outer_split_move_nothing():
    src = sh((8, 16), S(0), P("sum"), mesh=XY)
    assert plan_reshard(src, src, "t") == []
    assert reshard_collectives(src, src) == []
    inner_gathered = sh((8, 16), S(0), B, mesh=XY)
    both = sh((8, 16), S(0), S(0), mesh=XY)
    assert plan_reshard(both, inner_gathered, "t") == [AllGather(0, (1,))]


def test_moving_between_views_of_one_device_set_is_planned_on_their_refinement():
    """Issue 15 item 6: the 1-D view tp=8 and the 2x4 view (x, y) of the same 8 devices refine
    to (x=2, y=4); tp covers both, so Split(tp) -> Split(x) on the same axis gathers y."""
    TP8 = make_mesh((8,), ("tp",))
    src = sh((16, 8), S(0), mesh=TP8)
    assert plan_reshard(src, sh((16, 8), S(0), B, mesh=XY), "t") == [AllGather(0, (1,))]
    assert reshard_collectives(src, sh((16, 8), S(0), B, mesh=XY)) == ["y: all-gather(dim 0)"]
    assert plan_reshard(src, sh((16, 8), S(0), S(1), mesh=XY), "t") == [
        AllToAll(source=0, dest=1, mesh_axis=1)
    ]


def test_meshes_without_a_common_refinement_are_refused_naming_both():
    a, b = make_mesh((2, 3), ("p", "q")), make_mesh((3, 2), ("r", "s"))
    with pytest.raises(UnsupportedError, match=r"meshes .*p.*q.* and .*r.*s.* common refinement"):
        plan_reshard(sh((12, 6), S(0), B, mesh=a), sh((12, 6), S(0), B, mesh=b), "t")
    with pytest.raises(UnsupportedError, match="not views of one device set"):
        plan_reshard(sh((16, 8), S(0)), sh((16, 8), S(0), B, mesh=XY), "t")


def test_adding_an_inner_split_under_a_kept_outer_one_is_a_local_slice():
    """Issue 20: `S(0),B -> S(0),S(0)` on a 2x4 mesh keeps x's split of dim 0 and cuts each x
    block 4 ways along y: no communication, and never a re-cut of x's split."""
    src, dst = sh((8, 16), S(0), B, mesh=XY), sh((8, 16), S(0), S(0), mesh=XY)
    assert plan_reshard(src, dst, "t") == [Slice(((0, (1,)),))]
    assert reshard_collectives(src, dst) == ["y: slice (local, no communication)"]
    assert canonical_splits(dst, "t", "t") == {0: (0, 1)}


def test_adding_an_inner_split_runs_on_8_simulated_devices():
    """The same Reshard executed by the mesh simulator: gathered back through the new layout,
    the value is unchanged (a re-cut of x's split would scramble the row blocks)."""
    src, dst = sh((8, 16), S(0), B, mesh=XY), sh((8, 16), S(0), S(0), mesh=XY)
    x = Var("x", src)
    call = Call(Reshard(layout=dst.layout), (x,))
    fn = Function("f", (x,), call, TypeInferContext().infer(call))
    data = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(evaluate(fn, data), data)


def test_an_inner_factor_split_fails_closed_in_the_engines_words():
    inner = ShardLayout(Layout((2, 4), (4, 1)), (Split(1),), TP)
    type_ = make_tensor_type((8,), f32, layout=inner)
    with pytest.raises(UnsupportedError, match=r"inner factor.*the reference evaluator"):
        canonical_splits(type_, "t", "the reference evaluator")
    with pytest.raises(UnsupportedError, match=r"inner factor.*the SPMD exit"):
        plan_reshard(type_, make_tensor_type((8,), f32), "t")
    assert reshard_collectives(type_, make_tensor_type((8,), f32))[0].startswith("not lowerable")


def test_canonical_splits_and_pending_partials_read_outermost_first():
    type_ = sh((8, 16), S(0), S(0), mesh=XY)
    assert canonical_splits(type_, "t", "the test") == {0: (0, 1)}
    assert canonical_splits(make_tensor_type((8,), f32), "t", "the test") == {}
    assert pending_partials(sh((8, 16), P("max"), S(1), mesh=XY)) == {0: "max"}
    assert pending_partials(make_tensor_type((8,), f32)) == {}
