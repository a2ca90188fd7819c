"""ScatterAdd: index_add with a static result shape, the transpose of Gather (DESIGN §4.8's
`Gather(x, indices, axis, batch_dims)` read the other way): its typing and sharding rules, the
kernel against numpy, and the transpose property for every axis and batch_dims."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor import Gather, ScatterAdd
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    bool_,
    f32,
    f64,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Dynamic, P, S, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 2), ("x", "y"))
V = DimVar("V", 1, 1024)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def idx(shape, dtype=i32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def sidx(shape, mesh, *attrs):
    return sharded(shape, mesh, *attrs, dtype=i32)


A0, A1 = ScatterAdd(axis=0), ScatterAdd(axis=1)
BATCHED = ScatterAdd(axis=1, batch_dims=1)

# (id, op, x, indices, updates, expected type | error regex)
CASES = [
    # the result is x's type; updates have the shape of gather(x, indices, axis, batch_dims)
    ("axis 0", A0, plain((16, 8)), idx((3, 5)), plain((3, 5, 8)), plain((16, 8))),
    ("axis 1", A1, plain((16, 8)), idx((6,)), plain((16, 6)), plain((16, 8))),
    ("axis -1", ScatterAdd(axis=-1), plain((4, 8)), idx(()), plain((4,)), plain((4, 8))),
    ("batched", BATCHED, plain((2, 16, 8)), idx((2, 5)), plain((2, 5, 8)), plain((2, 16, 8))),
    ("symbolic table", A0, plain((V, 4)), idx((7,)), plain((7, 4)), plain((V, 4))),
    ("storage", A0, plain((8,), f32, "smem"), idx((2,), i32, "umat"), plain((2,), f32, "smem"),
     plain((8,), f32, "smem")),
    ("updates shape", A0, plain((16, 8)), idx((3,)), plain((3, 7)),
     r"'updates' has shape \[3, 7\] but gather\(x, indices, axis=0, batch_dims=0\) has shape "
     r"\[3, 8\]"),
    ("updates rank", A1, plain((16, 8)), idx((3, 2)), plain((16, 3)), r"has shape \[16, 3, 2\]"),
    ("dtype", A0, plain((8,)), idx((2,)), plain((2,), f64), r"'updates' is f64 but 'x' is f32"),
    ("float indices", A0, plain((8,)), plain((2,)), plain((2,)), r"integer dtype, got f32"),
    ("bool x", A0, plain((8,), bool_), idx((2,)), plain((2,), bool_), r"bool, which has no sum"),
    ("rank 0", A0, plain(()), idx(()), plain(()), r"rank-0 scalar"),
    ("axis range", ScatterAdd(axis=2), plain((4, 4)), idx(()), plain((4,)), r"axis 2 is out"),
    ("batch_dims > axis", ScatterAdd(axis=0, batch_dims=1), plain((2, 8)), idx((2, 3)),
     plain((2, 3)), r"min\(0, 2\)"),
    ("batch extents", BATCHED, plain((2, 8)), idx((3, 5)), plain((2, 5)),
     r"batch axis 0 has extent 2 in 'x' but 3"),
    # a carried axis: the result is Split there, a replicated operand cut to its block
    ("carried, both", A0, sharded((8, 8), X, S(1)), idx((4,)), sharded((4, 8), X, S(1)),
     sharded((8, 8), X, S(1))),
    ("carried, updates only", A0, plain((8, 8)), idx((4,)), sharded((4, 8), X, S(1)),
     sharded((8, 8), X, S(1))),
    ("carried batch, indices only", BATCHED, plain((4, 8)), sidx((4, 2), X, S(0)),
     plain((4, 2)), sharded((4, 8), X, S(0))),
    ("carried, split unlike", A0, sharded((8, 8), XY, S(1), B), idx((4,)),
     sharded((4, 8), XY, B, S(1)), r"operand 'updates' is split along its axis 1 over mesh axis "
     r"1 \('y'\), which the other operands split differently"),
    # the scattered axis: each device adds the updates whose index it owns
    ("scattered", A0, sharded((8, 4), X, S(0)), idx((6,)), plain((6, 4)),
     sharded((8, 4), X, S(0))),
    ("scattered + updates split", A0, sharded((8, 4), X, S(0)), idx((4,)),
     sharded((4, 4), X, S(0)), r"'updates' is split along its axis 0 over mesh axis 0"),
    # index positions, split alike on indices and updates: each device's share pends a sum
    ("index positions", A0, plain((8, 4)), sidx((4,), X, S(0)), sharded((4, 4), X, S(0)),
     sharded((8, 4), X, P("sum"))),
    ("index positions + carried", A0, plain((8, 4)), sidx((4,), XY, S(0), B),
     sharded((4, 4), XY, S(0), S(1)), sharded((8, 4), XY, P("sum"), S(1))),
    ("only updates split there", A0, plain((8, 4)), idx((4,)), sharded((4, 4), X, S(0)),
     r"only 'updates' is split along index position 0.*split 'indices' and 'updates' alike"),
    ("only indices split there", A0, plain((8, 4)), sidx((4,), X, S(0)), plain((4, 4)),
     r"only 'indices' is split along index position 0"),
    # Partial(sum) carries through the joint linear map; max/min and Partial indices refuse
    ("sum, both", A0, sharded((8, 4), X, P("sum")), idx((4,)), sharded((4, 4), X, P("sum")),
     sharded((8, 4), X, P("sum"))),
    ("sum, x only", A0, sharded((8, 4), X, P("sum")), idx((4,)), plain((4, 4)),
     sharded((8, 4), X, P("sum"))),
    ("sum, updates only", A0, plain((8, 4)), idx((4,)), sharded((4, 4), X, P("sum")),
     sharded((8, 4), X, P("sum"))),
    ("sum meets a Split", A0, sharded((8, 4), X, S(0)), idx((4,)), sharded((4, 4), X, P("sum")),
     r"'updates' carries Partial\(sum\) on mesh axis 0 \('x'\), which also splits the "
     r"scattered axis 0"),
    ("max", A0, sharded((8, 4), X, P("max")), idx((4,)), plain((4, 4)),
     r"'x' carries Partial\(max\).*does not commute with adding"),
    ("Partial indices", A0, plain((8, 4)), sidx((4,), X, P("sum")), plain((4, 4)),
     r"'indices' carries Partial\(sum\).*positions have no addends"),
    ("Dynamic", A0, sharded((8, 4), X, Dynamic()), idx((4,)), plain((4, 4)),
     r"'x' is Dynamic.*resolve it with reshard\(x"),
    ("two meshes", A0, sharded((8, 4), X, S(1)), idx((4,)), sharded((4, 4), XY, B, S(1)),
     r"different meshes"),
    ("all Broadcast is plain", A0, sharded((8, 4), X, B), idx((4,)), plain((4, 4)),
     plain((8, 4))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "x", "indices", "updates", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(op, x, indices, updates, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x, indices, updates)
    else:
        assert typeinfer_call(op, x, indices, updates) == expected


def test_data_dependent_positions_have_no_affine_relation():
    assert relations_of(A0, (plain((8,)), idx((2,)), plain((2,)))) is None


KERNEL = EVAL.lookup(ScatterAdd)


def _reference(x, indices, updates, axis, batch):
    """The element rule, one update at a time: out[c.., idx[b.., i..], t..] += u[c.., i.., t..]."""
    out = x.astype(np.float64).copy()
    n_index = indices.ndim - batch
    for u_pos in np.ndindex(*updates.shape):
        c, i, t = u_pos[:axis], u_pos[axis : axis + n_index], u_pos[axis + n_index :]
        target = indices[(*c[:batch], *i)]
        out[(*c, target, *t)] += updates[u_pos]
    return out


def test_duplicates_accumulate_like_numpy_add_at():
    x = np.zeros((5, 2))
    indices = np.array([4, 0, 4, 4, 1])
    updates = np.arange(10.0).reshape(5, 2)
    want = np.zeros((5, 2))
    np.add.at(want, indices, updates)
    got = KERNEL(A0, (x, indices, updates), plain((5, 2), f64))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("x_shape", "i_shape", "axis", "batch"),
    [((6, 3), (4, 2), 0, 0), ((3, 6, 2), (5,), 1, 0), ((2, 3, 6), (2, 3, 4), 2, 2),
     ((2, 6, 3), (2, 4), 1, 1), ((4,), (), 0, 0)],
)  # fmt: skip
def test_kernel_is_the_element_rule(x_shape, i_shape, axis, batch):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(x_shape)
    indices = rng.integers(0, x_shape[axis], i_shape)
    u_shape = (*x_shape[:axis], *i_shape[batch:], *x_shape[axis + 1 :])
    updates = rng.standard_normal(u_shape)
    op = ScatterAdd(axis=axis, batch_dims=batch)
    got = KERNEL(op, (x, indices, updates), plain(x_shape, f64))
    np.testing.assert_allclose(got, _reference(x, indices, updates, axis, batch), atol=1e-12)


def test_narrow_floats_accumulate_in_f32_and_round_once():
    import ml_dtypes

    updates = np.full((64, 1), 1.0, ml_dtypes.bfloat16)  # 256 + 64 ones: each one alone rounds away
    x = np.full((1, 1), 256.0, ml_dtypes.bfloat16)
    got = KERNEL(A0, (x, np.zeros(64, np.int64), updates), plain((1, 1), bf16))
    assert float(got[0, 0]) == 320.0


def test_out_of_range_indices_are_an_evaluation_error():
    with pytest.raises(EvalError, match=r"index 8 is out of range for axis 0 of extent 8"):
        KERNEL(A0, (np.zeros(8), np.array([1, 8]), np.ones(2)), plain((8,)))
    with pytest.raises(EvalError, match=r"index -1 is out of range"):
        KERNEL(A0, (np.zeros(8), np.array([-1]), np.ones(1)), plain((8,)))


@st.composite
def _gathers(draw):
    """A random Gather: x of rank 1-4, any axis, any batch_dims it accepts, indices of rank
    batch_dims..batch_dims+2 (rank 0 included), duplicate indices likely."""
    rank = draw(st.integers(1, 4))
    x_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(0, rank - 1))
    batch = draw(st.integers(0, axis))
    extra = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    return x_shape, (*x_shape[:batch], *extra), axis, batch


@settings(max_examples=80, deadline=None)
@given(_gathers(), st.integers(0, 2**31 - 1))
def test_scatter_add_is_the_transpose_of_gather(case, seed):
    """<gather(x), y> == <x, scatter_add(0, indices, y)> on random data: Gather's VJP."""
    x_shape, i_shape, axis, batch = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape)
    indices = rng.integers(0, x_shape[axis], i_shape).astype(np.int64)
    gather, scatter = Gather(axis=axis, batch_dims=batch), ScatterAdd(axis=axis, batch_dims=batch)
    x_type, i_type = plain(x_shape, f64), idx(i_shape, i64)
    y_type = typeinfer_call(gather, x_type, i_type)
    assert typeinfer_call(scatter, x_type, i_type, y_type) == x_type
    gathered = EVAL.lookup(Gather)(gather, (x, indices), y_type)
    y = rng.standard_normal(gathered.shape)
    transposed = KERNEL(scatter, (np.zeros(x_shape), indices, y), x_type)
    np.testing.assert_allclose(np.vdot(gathered, y), np.vdot(x, transposed), atol=1e-9)
