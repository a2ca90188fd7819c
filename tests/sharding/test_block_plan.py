"""The block plan of one call on a mesh, read off types and access relations alone (DESIGN §4.12).

The mesh simulation and the SPMD exit only carry these plans out, so the plan is checked here
on its own: what is partitioned, what is cut, the local result type and how results settle.
"""

from __future__ import annotations

import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.hir.tensor.slice import Slice
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.sharding.block_plan import ArgView, Block, BlockPlan, Engine, Kind, Settlement

MESH = make_mesh((4,), ("x",))
ENGINE = Engine("the test", "SHARDED_EVAL", "a", ("sum",), mesh_axis_label)


def sh(shape, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=MESH, attrs=attrs)


def plain(shape):
    return make_tensor_type(shape, f32)


def view(type_):
    if type_.layout is None:
        return ArgView(Kind.GLOBAL)
    return ArgView(Kind.SHARDED, type_, tuple(type_.shape))


def plan_of(op, *arg_types, out_type=None):
    out_type = out_type or typeinfer_call(op, *arg_types)
    views = [view(t) for t in arg_types]
    return BlockPlan(op, arg_types, views, out_type, [tuple(out_type.shape)], MESH, ENGINE)


def test_matmul_with_k_split_partitions_k_and_leaves_partial_addends():
    plan = plan_of(MatMul(), sh((3, 8), S(1)), plain((8, 5)))
    (k,) = plan.partition
    assert plan.partition[k] == Block((0,), 8)
    assert plan.input_cuts(1) == {0: Block((0,), 8)}  # the replicated rhs is cut along K
    assert plan.local_out_type().shape == (3, 5)
    assert plan.out_fields[0].layout.attrs == (P("sum"),)
    assert plan.settle(0, None) == Settlement((), {})  # Partial: nothing moves
    assert plan.completed_axes() == ()


def test_split_vector_plus_matrix_partitions_dim_1_and_cuts_the_matrix_on_axis_1():
    plan = plan_of(Binary(kind=BinaryKind.ADD), sh((8,), S(0)), plain((4, 8)))
    assert plan.partition == {1: Block((0,), 8)}
    assert plan.input_cuts(0) == {}  # already the device's block
    assert plan.input_cuts(1) == {1: Block((0,), 8)}
    assert plan.local_out_type().shape == (4, 2)
    assert plan.settle(0, None) == Settlement((), {})


def test_a_k_split_under_a_replicated_result_is_all_reduced_with_the_combiner():
    plan = plan_of(MatMul(), sh((3, 8), S(1)), plain((8, 5)), out_type=sh((3, 5), B))
    assert plan.completed_axes() == (0,)
    assert plan.settle(0, "sum") == Settlement((0,), {})
    with pytest.raises(UnsupportedError, match=r"names no combiner.*complete='sum'"):
        plan.settle(0, None)


def test_a_split_result_computed_whole_keeps_each_devices_block():
    plan = plan_of(Binary(kind=BinaryKind.ADD), plain((8,)), plain((8,)), out_type=sh((8,), S(0)))
    assert plan.partition == {}
    assert plan.input_cuts(0) is None
    assert plan.settle(0, None) == Settlement((), {0: (0,)})


def test_a_split_read_through_a_translated_access_fails_closed():
    op = Slice(begin=(2,), end=(6,))
    with pytest.raises(UnsupportedError, match=r"reads as .*the test partitions only dims"):
        plan_of(op, sh((8,), S(0)), out_type=plain((4,)))


def test_a_local_argument_has_no_block_reading():
    args = (sh((8,), S(0)), plain((8,)))
    views = [view(args[0]), ArgView(Kind.LOCAL)]
    plan = BlockPlan(Binary(kind=BinaryKind.ADD), args, views, plain((8,)), [(8,)], MESH, ENGINE)
    with pytest.raises(UnsupportedError, match=r"Local.*the test cannot tell"):
        plan.input_cuts(1)
