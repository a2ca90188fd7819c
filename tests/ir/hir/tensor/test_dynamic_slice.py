"""DynamicSlice / DynamicUpdateSlice: loop windows with a runtime start (DESIGN §4.14).

parser §1.7: a `tile(...)` loop variable is the window's RangeSlice; parser §1.9: a runtime start
needs a compile-time size. semantic-analysis §3.2: a translated access fails closed on a Split
axis. The one out-of-range behaviour (clamping, as StableHLO's dynamic_slice) is checked here
against numpy written out by hand.
"""

from __future__ import annotations

import islpy as isl
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor import DynamicSlice, DynamicUpdateSlice
from tilefoundry.ir.types import DimVar, f32, i32, i64, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.rules import EVAL
from tilefoundry.sharding.axis_access import WholeAxis, axis_accesses

X = make_mesh((2,), ("x",))
N = DimVar("N", 4, 64)
START = make_tensor_type((), i64, "umat")


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=X, attrs=attrs)


READ_CASES = [
    # (id, op, x, start, expected type | error regex)
    ("column window", DynamicSlice(axis=1, size=4), plain((8, 16)), START, plain((8, 4))),
    ("row window, scaled", DynamicSlice(axis=0, size=2, scale=2), plain((8, 4)), START,
     plain((2, 4))),
    ("negative axis", DynamicSlice(axis=-1, size=4), plain((8, 16)), START, plain((8, 4))),
    ("storage follows x", DynamicSlice(axis=0, size=2), plain((8,), storage="smem"), START,
     plain((2,), storage="smem")),
    ("i32 start", DynamicSlice(axis=0, size=2), plain((8,)), plain((), i32), plain((2,))),
    # the window must fit the smallest extent the axis can take (DimVar lower bound 4)
    ("symbolic axis, window fits its lower bound", DynamicSlice(axis=0, size=4), plain((N, 2)),
     START, plain((4, 2))),
    ("symbolic axis, window above its lower bound", DynamicSlice(axis=0, size=5), plain((N, 2)),
     START, r"window of 5 elements is wider than axis 0 of extent N"),
    ("window wider than the axis", DynamicSlice(axis=1, size=32), plain((8, 16)), START,
     r"DynamicSlice: the window of 32 elements is wider than axis 1 of extent 16; use a window"),
    ("empty window", DynamicSlice(axis=0, size=0), plain((8,)), START, r"must be positive"),
    ("float start", DynamicSlice(axis=0, size=2), plain((8,)), plain(()),
     r"operand 'start' must be an integer scalar"),
    ("vector start", DynamicSlice(axis=0, size=2), plain((8,)), plain((2,), i64),
     r"operand 'start' must be an integer scalar"),
    # semantic-analysis §3.2: a translated access fails closed on a Split axis, with the remedy
    ("split windowed axis", DynamicSlice(axis=0, size=4), sharded((8, 4), S(0)), START,
     r"Split on mesh axis 0 \('x'\) along the windowed axis 0.*semantic-analysis §3.2.*"
     r"insert reshard\(x, \.\.\.\) to Broadcast"),
    # ... and a split on another axis survives as a projection
    ("split other axis", DynamicSlice(axis=1, size=2), sharded((8, 4), S(0)), START,
     sharded((8, 2), S(0))),
    # DESIGN §4.12: a fully Broadcast value is one replicated value, typed plain
    ("broadcast", DynamicSlice(axis=1, size=2), sharded((8, 4), B), START, plain((8, 2))),
    # selection commutes with a pending sum
    ("partial carries", DynamicSlice(axis=1, size=2), sharded((8, 4), P("sum")), START,
     sharded((8, 2), P("sum"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "op", "x", "start", "expected"), READ_CASES, ids=[c[0] for c in READ_CASES]
)
def test_dynamic_slice_typeinfer(case, op, x, start, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x, start)
    else:
        assert typeinfer_call(op, x, start) == expected


def test_size_must_be_a_compile_time_int():
    """parser §1.9: a runtime start needs a compile-time size."""
    with pytest.raises(VerifyError, match="compile-time int"):
        DynamicSlice(axis=0, size=N)


def test_relation_is_a_translated_access_on_the_windowed_axis():
    """semantic-analysis §3.2: the windowed axis is not a projection (no owner proof); the
    other axes are."""
    relations = relations_of(DynamicSlice(axis=1, size=4), (plain((8, 16)), START))
    x_axes = axis_accesses(relations.inputs[0].pattern)
    assert isinstance(x_axes[1], WholeAxis)
    assert not isinstance(x_axes[0], WholeAxis) and x_axes[0].dims == frozenset({0})
    # output column 3 reads x column 3 + s for a runtime s in [0, 16 - 4]
    read = relations.inputs[0].pattern.relation
    reached = read.intersect_domain(isl.Set("{ [0, 3] }")).range()
    assert reached == isl.Set("{ [0, w] : 3 <= w <= 15 }")


def _kernel(op, *args):
    return EVAL.lookup(type(op))(op, args, None)


@pytest.mark.parametrize(("start", "begin"), [(0, 0), (3, 6), (7, 12), (-5, 0)])
def test_dynamic_slice_clamps_like_stablehlo(start, begin):
    """DESIGN §4.14: one behaviour for starts the loop domain cannot prove — clamp into
    [0, extent - size] (StableHLO dynamic_slice). scale 2: start 3 -> 6, 7 -> 14 clamped to 12."""
    x = np.arange(64, dtype=np.float32).reshape(4, 16)
    got = _kernel(DynamicSlice(axis=1, size=4, scale=2), x, np.int64(start))
    np.testing.assert_array_equal(got, x[:, begin : begin + 4])


def test_dynamic_slice_offset():
    x = np.arange(10, dtype=np.float32)
    got = _kernel(DynamicSlice(axis=0, size=3, scale=1, offset=2), x, np.int64(4))
    np.testing.assert_array_equal(got, np.array([6, 7, 8], dtype=np.float32))


def test_dynamic_slice_rejects_a_non_integer_start_at_run_time():
    with pytest.raises(EvalError, match="start must be one integer"):
        _kernel(DynamicSlice(axis=0, size=2), np.zeros(4, np.float32), np.float32(1.0))


WRITE_CASES = [
    # (id, op, x, update, expected | error)
    ("column window", DynamicUpdateSlice(axis=1), plain((8, 16)), plain((8, 4)), plain((8, 16))),
    ("destination storage", DynamicUpdateSlice(axis=0), plain((8,), storage="rmem"), plain((2,)),
     plain((8,), storage="rmem")),
    ("update wider than the axis", DynamicUpdateSlice(axis=0), plain((4,)), plain((8,)),
     r"window of 8 elements is wider than axis 0 of extent 4"),
    ("other extent differs", DynamicUpdateSlice(axis=1), plain((8, 16)), plain((4, 4)),
     r"'update' extent 4 differs from 'x' extent 8 on axis 0"),
    ("rank differs", DynamicUpdateSlice(axis=0), plain((8, 16)), plain((16,)),
     r"'update' has rank 1 but 'x' has rank 2"),
    ("dtype differs", DynamicUpdateSlice(axis=0), plain((8,)), plain((2,), i32),
     r"no implicit promotion"),
    ("split window axis", DynamicUpdateSlice(axis=0), sharded((8, 4), S(0)), plain((2, 4)),
     r"Split on mesh axis 0 \('x'\) along axis 0.*insert reshard"),
    ("split alike elsewhere", DynamicUpdateSlice(axis=1), sharded((8, 4), S(0)),
     sharded((8, 2), S(0)), sharded((8, 4), S(0))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "op", "x", "update", "expected"), WRITE_CASES, ids=[c[0] for c in WRITE_CASES]
)
def test_dynamic_update_slice_typeinfer(case, op, x, update, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x, update, START)
    else:
        assert typeinfer_call(op, x, update, START) == expected


@pytest.mark.parametrize(("start", "begin"), [(1, 1), (4, 4), (9, 4), (-1, 0)])
def test_dynamic_update_slice_writes_and_clamps(start, begin):
    x = np.zeros((2, 8), np.float32)
    update = np.ones((2, 4), np.float32)
    got = _kernel(DynamicUpdateSlice(axis=1), x, update, np.int64(start))
    expected = np.zeros((2, 8), np.float32)
    expected[:, begin : begin + 4] = 1.0
    np.testing.assert_array_equal(got, expected)
    assert not x.any(), "the kernel must not write into its operand"
