"""Gather: the seed entry (hir tensor Gather, DESIGN §4.8) row by row, and the kernel."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.gather import Gather
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    bool_,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
)
from tilefoundry.ir.types.shard import (
    B,
    ComposedLayout,
    Dynamic,
    Layout,
    P,
    S,
    ShardLayout,
    make_mesh,
)
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
V = DimVar("V", 1, 1024)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def idx(shape, dtype=i32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def laid_out(shape, layout_shape, stride, mesh, *attrs):
    return make_tensor_type(
        shape, f32, layout=ShardLayout(Layout(layout_shape, stride), attrs, mesh)
    )


# (id, op, x, indices, expected type | error regex)
CASES = [
    # shape = x.shape[:axis] + indices.shape[batch_dims:] + x.shape[axis+1:]
    ("axis 0", Gather(axis=0), plain((16, 8)), idx((3, 5)), plain((3, 5, 8))),
    ("axis 1", Gather(axis=1), plain((16, 8)), idx((3, 5)), plain((16, 3, 5))),
    ("axis -1", Gather(axis=-1), plain((16, 8)), idx((6,)), plain((16, 6))),
    ("rank-0 indices drop the axis", Gather(axis=0), plain((16, 8)), idx(()), plain((8,))),
    ("symbolic vocabulary", Gather(axis=0), plain((V, 64)), idx((7,)), plain((7, 64))),
    ("axis out of range", Gather(axis=2), plain((16, 8)), idx((3,)), r"axis 2 is out of range"),
    ("rank-0 x", Gather(axis=0), plain(()), idx((3,)), r"operand 'x' is a rank-0 scalar"),
    # batch_dims: 0 <= batch_dims <= min(axis, rank(indices)); leading dims equal
    ("batched", Gather(axis=1, batch_dims=1), plain((2, 16, 8)), idx((2, 5)), plain((2, 5, 8))),
    ("batched, 2 dims", Gather(axis=2, batch_dims=2), plain((2, 3, 16)), idx((2, 3, 4)),
     plain((2, 3, 4))),
    ("batch_dims > axis", Gather(axis=0, batch_dims=1), plain((2, 8)), idx((2, 5)),
     r"batch_dims 1 must satisfy 0 <= batch_dims <= min\(axis, rank\(indices\)\) = min\(0, 2\)"),
    ("batch_dims > rank(indices)", Gather(axis=2, batch_dims=2), plain((2, 3, 8)), idx((2,)),
     r"min\(2, 1\)"),
    ("negative batch_dims", Gather(axis=1, batch_dims=-1), plain((2, 8)), idx((2,)),
     r"batch_dims -1 must satisfy"),
    ("batch extents differ", Gather(axis=1, batch_dims=1), plain((2, 8)), idx((3, 5)),
     r"batch axis 0 has extent 2 in 'x' but 3 in 'indices'"),
    # a leading-dimension coincidence does not enable batching
    ("no implicit batching", Gather(axis=1), plain((2, 16)), idx((2, 3)), plain((2, 2, 3))),
    # indices: integer dtype
    ("i64 indices", Gather(axis=0), plain((16,)), idx((2,), i64), plain((2,))),
    ("u8 indices", Gather(axis=0), plain((16,)), idx((2,), u8), plain((2,))),
    ("float indices", Gather(axis=0), plain((16,)), idx((2,), f32),
     r"'indices' must have an integer dtype, got f32"),
    ("bool indices", Gather(axis=0), plain((16,)), idx((2,), bool_), r"integer dtype, got bool"),
    # storage anchors on the concrete operands (semantic-analysis §3.3)
    ("umat indices abstain", Gather(axis=0), plain((16,), f32, "smem"), idx((2,), i32, "umat"),
     plain((2,), f32, "smem")),
    ("storages disagree", Gather(axis=0), plain((16,), f32, "smem"), idx((2,)),
     r"Gather: operands live in different storages"),
    # Split on the gathered axis -> Partial(sum) on that mesh axis; C-order layout
    ("Split on gathered axis", Gather(axis=0), sharded((16, 8), X, S(0)), idx((5,)),
     laid_out((5, 8), (5, 8), (8, 1), X, P("sum"))),
    ("Split on gathered axis (y)", Gather(axis=1), sharded((4, 8), XY, B, S(1)), idx((2, 3)),
     laid_out((4, 2, 3), (4, 2, 3), (6, 3, 1), XY, B, P("sum"))),
    # Split elsewhere carries, renumbered around the index dims
    ("Split after", Gather(axis=0), sharded((16, 8), X, S(1)), idx((3, 5)),
     sharded((3, 5, 8), X, S(2))),
    ("Split before", Gather(axis=1), sharded((4, 16, 8), X, S(0)), idx((3, 5)),
     sharded((4, 3, 5, 8), X, S(0))),
    ("Split after, rank-0 indices", Gather(axis=1), sharded((16, 8, 4), XY, S(2), B), idx(()),
     sharded((16, 4), XY, S(1), B)),
    ("two Splits elsewhere", Gather(axis=1), sharded((8, 16, 4), XY, S(0), S(2)), idx((6,)),
     sharded((8, 6, 4), XY, S(0), S(2))),
    ("one axis on two mesh axes", Gather(axis=1), sharded((16, 8), XY, S(0), S(0)), idx((3,)),
     sharded((16, 3), XY, S(0), S(0))),
    # multiple Splits where one targets the gathered axis fail closed
    ("gathered + other Split", Gather(axis=1), sharded((16, 8), XY, S(0), S(1)), idx((3,)),
     r"several Splits.*gathered axis 1.*reshard\(x, \.\.\.\) to Broadcast on mesh axis 1 \('y'\)"),
    ("gathered on two mesh axes", Gather(axis=0), sharded((16, 8), XY, S(0), S(0)), idx((3,)),
     r"several Splits"),
    # Broadcast and Partial carry through unchanged (gather is a linear row selection)
    ("Partial sum", Gather(axis=0), sharded((16, 8), XY, B, P("sum")), idx((3,)),
     sharded((3, 8), XY, B, P("sum"))),
    ("Partial max + Split", Gather(axis=0), sharded((16, 8), XY, P("max"), S(1)), idx((3,)),
     sharded((3, 8), XY, P("max"), S(1))),
    ("Partial min + gathered Split", Gather(axis=0), sharded((16, 8), XY, S(0), P("min")),
     idx((3,)), laid_out((3, 8), (3, 8), (8, 1), XY, P("sum"), P("min"))),
    ("fully Broadcast", Gather(axis=0), sharded((16, 8), XY, B, B), idx((3,)), plain((3, 8))),
    # the internal Layout is natural C-order, never inherited (per-instance strides dropped)
    ("fresh C-order", Gather(axis=1), laid_out((16, 8), (4, 4, 8), (0, 8, 1), X, S(0)),
     idx((5,)), sharded((16, 5), X, S(0))),
    # issue 29: a batched gather takes the same rules, its batch axes carried (the seed's
    # "value-carrying shards fail closed" for batch_dims > 0 is lifted, DESIGN §4.8)
    ("batched on Split", Gather(axis=1, batch_dims=1), sharded((4, 16), X, S(0)), idx((4, 2)),
     sharded((4, 2), X, S(0))),
    ("batched on Partial", Gather(axis=1, batch_dims=1), sharded((4, 16), X, P("sum")),
     idx((4, 2)), sharded((4, 2), X, P("sum"))),
    ("batched on Broadcast", Gather(axis=1, batch_dims=1), sharded((4, 16), X, B), idx((4, 2)),
     plain((4, 2))),
    ("batched, gathered Split (the target logit)", Gather(axis=1, batch_dims=1),
     sharded((4, 16), X, S(1)), idx((4, 1)), laid_out((4, 1), (4, 1), (1, 1), X, P("sum"))),
    ("batched, carried Split after", Gather(axis=1, batch_dims=1),
     sharded((4, 16, 8), XY, B, S(2)), idx((4, 3)), sharded((4, 3, 8), XY, B, S(2))),
    ("batched, gathered + batch Split", Gather(axis=1, batch_dims=1),
     sharded((4, 16), XY, S(0), S(1)), idx((4, 3)), r"several Splits"),
    # indices split along a batch axis exactly as x splits it: each device its own rows
    ("batched, indices split alike", Gather(axis=1, batch_dims=1), sharded((4, 16), X, S(0)),
     sharded((4, 3), X, S(0), dtype=i32), sharded((4, 3), X, S(0))),
    ("batched, only indices split", Gather(axis=1, batch_dims=1), plain((4, 16)),
     sharded((4, 3), X, S(0), dtype=i32), r"indices' carries the sharding.*batch axis that 'x'"),
    ("batched, indices split on an index axis", Gather(axis=1, batch_dims=1),
     sharded((4, 16), X, S(0)), sharded((4, 4), X, S(1), dtype=i32), r"indices' carries"),
    # indices are otherwise replicated: a sharded indices operand fails closed
    ("Split indices", Gather(axis=0), plain((16,)), sharded((8,), X, S(0), dtype=i32),
     r"operand 'indices' carries the sharding.*reshard\(indices"),
    ("Partial indices", Gather(axis=0), plain((16,)), sharded((8,), X, P("sum"), dtype=i32),
     r"operand 'indices' carries"),
    ("Broadcast indices", Gather(axis=0), plain((16,)), sharded((8,), X, B, dtype=i32),
     plain((8,))),
    # unresolved distributions fail closed
    ("Dynamic x", Gather(axis=0), sharded((16, 8), XY, Dynamic(), B), idx((3,)),
     r"Dynamic on mesh axis 0"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "x", "indices", "expected"), [pytest.param(*r[1:], id=r[0]) for r in CASES]
)
def test_typeinfer(op, x, indices, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x, indices)
    else:
        assert typeinfer_call(op, x, indices) == expected


def test_composed_layout_fails_closed():
    composed = ComposedLayout(Layout((4, 4, 8), (32, 8, 1)), 0, Layout((4, 4, 8), (32, 8, 1)))
    x = make_tensor_type((16, 8), f32, layout=ShardLayout(composed, (S(0),), X))
    with pytest.raises(VerifyError, match="composed layout"):
        typeinfer_call(Gather(axis=1), x, idx((3,)))


def test_data_dependent_read_has_no_affine_relation():
    assert relations_of(Gather(axis=0), (plain((16, 8)), idx((3,)))) is None


KERNEL = EVAL.lookup(Gather)


def test_kernel_against_literal():
    x = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=np.float32)
    out = KERNEL(Gather(axis=0), (x, np.array([2, 0, 2])), plain((3, 3)))
    assert out.tolist() == [[7, 8, 9], [1, 2, 3], [7, 8, 9]]
    out = KERNEL(Gather(axis=-1), (x, np.array([[1], [0]])), plain((3, 2, 1)))
    assert out.tolist() == [[[2], [1]], [[5], [4]], [[8], [7]]]
    out = KERNEL(Gather(axis=1), (x, np.array(2)), plain((3,)))
    assert out.tolist() == [3, 6, 9]


def test_kernel_batched_matches_the_element_rule():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    index = rng.integers(0, 5, size=(2, 3, 6))
    out = KERNEL(Gather(axis=2, batch_dims=2), (x, index), plain((2, 3, 6, 4)))
    assert out.shape == (2, 3, 6, 4)
    for b0, b1, i, t in [(0, 0, 0, 0), (1, 2, 5, 3), (1, 0, 3, 1)]:
        assert out[b0, b1, i, t] == x[b0, b1, index[b0, b1, i], t]


def test_kernel_batched_with_leading_axes_between():
    x = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    index = np.array([[3, 0], [1, 1]])
    out = KERNEL(Gather(axis=2, batch_dims=1), (x, index), plain((2, 3, 2)))
    for b in range(2):
        for c in range(3):
            for i in range(2):
                assert out[b, c, i] == x[b, c, index[b, i]]


@pytest.mark.parametrize("bad", [[0, 3], [-1]])
def test_kernel_out_of_range_index(bad):
    with pytest.raises(EvalError, match=r"index -?\d+ is out of range for axis 0 of extent 3"):
        KERNEL(Gather(axis=0), (np.zeros((3, 2)), np.array(bad)), plain((len(bad), 2)))


def test_kernel_rejects_float_indices():
    with pytest.raises(EvalError, match="must be integers"):
        KERNEL(Gather(axis=0), (np.zeros((3,)), np.array([0.0])), plain((1,)))


def test_kernel_empty_and_narrow_floats():
    x = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16)
    out = KERNEL(Gather(axis=0), (x, np.array([1])), make_tensor_type((1, 2), bf16))
    assert out.dtype == ml_dtypes.bfloat16 and out.astype(np.float32).tolist() == [[0.25, 3.0]]
    f8 = np.array([0.5, 1.0, 2.0], dtype=ml_dtypes.float8_e4m3fn)
    out = KERNEL(Gather(axis=0), (f8, np.array([2, 2], dtype=np.int64)), plain((2,)))
    assert out.astype(np.float32).tolist() == [2.0, 2.0]
    empty = KERNEL(Gather(axis=0), (np.zeros((4, 2)), np.zeros((0,), np.int32)), plain((0, 2)))
    assert empty.shape == (0, 2)
    no_batch = KERNEL(
        Gather(axis=1, batch_dims=1), (np.zeros((0, 5)), np.zeros((0, 3), np.int32)), plain((0, 3))
    )
    assert no_batch.shape == (0, 3)
