"""Reduce (hir §1.3 Reduce): typeinfer case table, relation, and the reference kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_relation import reduction_dims
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.tensor.reduce import Reduce, ReduceKind, reduce_identity
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    bool_,
    f8e8m0,
    f32,
    fp8e4m3,
    i8,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, ComposedLayout, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)


t = make_tensor_type  # the shorthand the case tables use


def sharded(shape, mesh, *attrs, dtype=f32):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def shard(layout_shape, stride, attrs, mesh):
    return ShardLayout(Layout(layout_shape, stride), attrs, mesh)


def red(axes, keepdim=True, kind="sum"):
    return Reduce(axes=axes, keepdim=keepdim, kind=kind)


ACCEPT = [
    # hir §1.3 Reduce: the logical result shape follows numpy reduction rules.
    ("keepdim", red((1,)), t((4, 8)), t((4, 1))),
    ("drop", red((1,), keepdim=False), t((4, 8)), t((4,))),
    ("negative axis", red((-1,), keepdim=False), t((4, 8)), t((4,))),
    ("two axes", red((0, 2), keepdim=False), t((2, 3, 4)), t((3,))),
    ("unsorted axes", red((2, 0)), t((2, 3, 4)), t((1, 3, 1))),
    ("no axes", red(()), t((2, 3)), t((2, 3))),
    ("lone int axis", red(1), t((2, 3)), t((2, 1))),
    ("all axes to scalar", red((0, 1), keepdim=False), t((2, 3)), t(())),
    ("symbolic kept", red((1,)), t((N, 8)), t((N, 1))),
    ("symbolic reduced", red((0,), keepdim=False, kind="mean"), t((N, 8)), t((8,))),
    ("default kind is mean", Reduce(axes=(0,)), t((4, 8)), t((1, 8))),
    # hir §1.3 Reduce: an empty reduction returns the kind's identity (sum: 0) — types fine.
    ("sum over extent 0", red((0,)), t((0, 3)), t((1, 3))),
    ("max over extent 0", red((0,), kind="max"), t((0, 3)), t((1, 3))),
    ("max of bool", red((0,), kind="max"), t((3,), bool_), t((1,), bool_)),
    ("sum of i8 keeps i8", red((0,)), t((3,), i8), t((1,), i8)),
    ("mean of bf16", red((0,), kind="mean"), t((3,), bf16), t((1,), bf16)),
    # hir §1.3 Reduce: storage is preserved.
    ("rmem", red((0,)), t((4, 8), storage="rmem"), t((1, 8), storage="rmem")),
    ("umat", red((0,)), t((4, 8), storage="umat"), t((1, 8), storage="umat")),
    # hir §1.3 Reduce: plain input layout passes through (surviving modes verbatim; a kept
    # reduced mode is 1:0, a dropped one is gone — module doc).
    (
        "plain layout keepdim",
        red((1,)),
        t((4, 8), layout=Layout((4, 8), (1, 4))),
        t((4, 1), layout=Layout((4, 1), (1, 0))),
    ),
    (
        "plain layout drop",
        red((1,), keepdim=False),
        t((4, 8), layout=Layout((4, 8), (1, 4))),
        t((4,), layout=Layout((4,), (1,))),
    ),
    (
        "plain layout nested mode",
        red((0,), keepdim=False),
        t((4, 8), layout=Layout((4, (2, 4)), (8, (4, 1)))),
        t((8,), layout=Layout(((2, 4),), ((4, 1),))),
    ),
    (
        "plain layout un-materialised",
        red((0,)),
        t((4, 8), layout=Layout((4, 8))),
        t((1, 8), layout=Layout((1, 8))),
    ),
    # hir §1.3 Reduce: a split layout position of a reduced axis collapses to Broadcast with a
    # size-1 stride-0 output (the reduction over the Split is completed, DESIGN §4.12).
    (
        "split reduced keepdim",
        red((1,)),
        sharded((8, 16), X, S(1)),
        t((8, 1), layout=shard((8, 1), (1, 0), (B,), X)),
    ),
    (
        "split reduced drop",
        red((1,), keepdim=False),
        sharded((8, 16), X, S(1)),
        t((8,), layout=shard((8,), (1,), (B,), X)),
    ),
    (
        "split survives",
        red((0,), kind="max"),
        sharded((8, 16), X, S(1)),
        t((1, 16), layout=shard((1, 4, 4), (16, 4, 1), (S(1),), X)),
    ),
    (
        "two-axis mesh, one split reduced",
        red((1,)),
        sharded((8, 16), XY, S(0), S(1)),
        t((8, 1), layout=shard((2, 4, 1), (4, 1, 0), (S(0), B), XY)),
    ),
    (
        "two mesh axes on one reduced axis",
        red((0,), kind="abs_max"),
        sharded((16, 4), XY, S(0), S(0)),
        t((1, 4), layout=shard((1, 4), (0, 1), (B, B), XY)),
    ),
    (
        "fully Broadcast shard is replicated",
        red((0,)),
        sharded((8, 4), X, B),
        t((1, 4)),
    ),
    # hir §1.3 Reduce: SUM / MEAN commute with reduction="sum" only.
    (
        "sum keeps Partial(sum)",
        red((1,)),
        sharded((8, 16), X, P("sum")),
        t((8, 1), layout=shard((8, 1), (1, 1), (P("sum"),), X)),
    ),
    (
        "mean keeps Partial(sum) beside a completed split",
        red((1,), keepdim=False, kind="mean"),
        sharded((8, 16), XY, P("sum"), S(1)),
        t((8,), layout=shard((8,), (1,), (P("sum"), B), XY)),
    ),
    # hir §1.3 Reduce: MAX commutes with reduction="max" only.
    (
        "max keeps Partial(max)",
        red((0,), kind="max"),
        sharded((8, 16), XY, S(1), P("max")),
        t((1, 16), layout=shard((1, 2, 8), (16, 8, 1), (S(1), P("max")), XY)),
    ),
]


@pytest.mark.parametrize(("case", "op", "x", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, op, x, expected):
    assert typeinfer_call(op, x) == expected


def _composed_shard():
    inner = ComposedLayout(Layout((4, 8), (8, 1)), 0, None)
    return t((4, 8), layout=ShardLayout(inner, (S(0),), X))


REJECT = [
    ("axis out of range", red((2,)), t((4, 8)), r"Reduce: reduction axis 2 is out of range"),
    ("axis listed twice", red((1, -1)), t((4, 8)), r"Reduce: axis -1 is listed twice"),
    ("non-int axis", red(("a",)), t((4, 8)), r"Reduce: reduction axis must be an int"),
    # hir §1.3 Reduce: mean has no identity, so it must not invent one (extent statically 0).
    ("mean over extent 0", red((0,), kind="mean"), t((0, 3)), r"Reduce: mean over axis 0 .*0"),
    # torch semantics: mean needs a float; sum / abs_max / mean of bool are refused (module doc).
    ("mean of int", red((0,), kind="mean"), t((3,), i32), r"Reduce: mean of a i32 tensor"),
    ("sum of bool", red((0,)), t((3,), bool_), r"Reduce: sum of a bool tensor"),
    ("abs_max of bool", red((0,), kind="abs_max"), t((3,), bool_), r"abs_max of a bool"),
    # hir §1.3 Reduce: a plain input layout needs a per-axis projection (fail closed).
    (
        "composed plain layout",
        red((0,)),
        t((4, 8), layout=ComposedLayout(Layout((4, 8), (8, 1)), 0, None)),
        r"Reduce: x has a ComposedLayout layout",
    ),
    # hir §1.3 Reduce: non-default-stride sharded input must carry explicit producer strides.
    ("sharded composed layout", red((1,)), _composed_shard(), r"carries no explicit producer"),
    # hir §1.3 Reduce: SUM / MEAN commute with reduction="sum" only.
    (
        "sum refuses Partial(max)",
        red((1,)),
        sharded((8, 16), X, P("max")),
        r"Reduce: operand 'x' carries Partial\(max\) on mesh axis 0 \('x'\), and sum is linear"
        r".*insert reshard\(x, \.\.\.\) to Broadcast on mesh axis 0 \('x'\)",
    ),
    (
        "mean refuses Partial(min)",
        red((1,), kind="mean"),
        sharded((8, 16), XY, S(0), P("min")),
        r"Partial\(min\) on mesh axis 1 \('y'\), and mean is linear.*Broadcast on mesh axis 1",
    ),
    # hir §1.3 Reduce: MAX commutes with reduction="max" only.
    (
        "max refuses Partial(sum)",
        red((0,), kind="max"),
        sharded((8, 16), X, P("sum")),
        r"Reduce: operand 'x' carries Partial\(sum\).*max commutes with a pending max only",
    ),
    # hir §1.3 Reduce: ABS_MAX does not commute with any reduction.
    (
        "abs_max refuses Partial(max)",
        red((0,), kind="abs_max"),
        sharded((8, 16), XY, P("max"), B),
        r"Partial\(max\) on mesh axis 0 \('x'\), and abs_max .* no pending reduction",
    ),
    (
        "abs_max refuses Partial(sum)",
        red((0,), kind="abs_max"),
        sharded((8, 16), X, P("sum")),
        r"Partial\(sum\).*abs_max",
    ),
]


@pytest.mark.parametrize(("case", "op", "x", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, op, x, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(op, x)


def test_unknown_kind_is_refused_at_construction():
    with pytest.raises(VerifyError, match="unknown ReduceKind 'prod'"):
        Reduce(axes=(0,), kind="prod")


def test_kind_names_and_surface():
    assert Reduce(axes=(0,), kind="abs_max").kind is ReduceKind.ABS_MAX
    entry = surface_entry("reduce")
    assert entry.op_class is Reduce and entry.fixed == {}


def test_relation_reduces_the_listed_axes():
    from tilefoundry.rules import ACCESS_RELATION

    relations = ACCESS_RELATION.lookup(Reduce)(red((0, -1), keepdim=False), (t((2, 3, 4)),))
    assert reduction_dims(relations) == frozenset({0, 2})


def test_tuple_operand_is_a_verify_error():
    with pytest.raises(VerifyError, match="Reduce: operand 'x' must be a tensor"):
        typeinfer_call(red((0,)), TupleType((t((2,)),)))


# ---------------------------------------------------------------------------------------------
# Reference kernel

KERNEL = EVAL.lookup(Reduce)


def run(op, x, out_dtype=None):
    dtype = out_dtype or f32
    return KERNEL(op, (x,), t((), dtype))


def test_sum_mean_max_abs_max_against_literals():
    x = np.array([[1.0, -5.0, 2.0], [3.0, 4.0, -0.5]], np.float32)
    np.testing.assert_array_equal(run(red((1,), False), x), [-2.0, 6.5])
    np.testing.assert_array_equal(run(red((0,), True, "mean"), x), [[2.0, -0.5, 0.75]])
    np.testing.assert_array_equal(run(red((-1,), False, "max"), x), [2.0, 4.0])
    np.testing.assert_array_equal(run(red((0, 1), False, "abs_max"), x), 5.0)
    np.testing.assert_array_equal(run(red((), True), x), x)


def test_integer_sum_stays_in_the_int_dtype():
    x = np.array([100, 100], np.int8)
    out = run(red((0,), False), x, i8)
    assert out.dtype == np.int8 and out == np.int8(-56)


def test_bf16_sum_accumulates_in_f32():
    # bf16 holds 256 and 264 but not 257: adding the eight 1s one at a time in bf16 would stay
    # at 256; an f32 accumulator reaches 264 and rounds once.
    x = np.array([256.0] + [1.0] * 8, ml_dtypes.bfloat16)
    out = run(red((0,), False), x, bf16)
    assert out.dtype == ml_dtypes.bfloat16 and float(out) == 264.0


def test_fp8_max_and_mean():
    x = np.array([[1.0, -2.0], [3.0, 0.5]], ml_dtypes.float8_e4m3fn)
    out = run(red((1,), False, "max"), x, fp8e4m3)
    assert out.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(out.astype(np.float32), [1.0, 3.0])
    mean = run(red((0,), False, "mean"), x, fp8e4m3).astype(np.float32)
    np.testing.assert_array_equal(mean, [2.0, -0.75])


@pytest.mark.parametrize(
    ("kind", "dtype", "np_dtype", "expected"),
    [
        # hir §1.3 Reduce: max is the least value the result dtype can hold.
        ("max", f32, np.float32, -np.inf),
        ("max", bf16, ml_dtypes.bfloat16, -np.inf),
        ("max", i32, np.int32, -(2**31)),
        ("max", bool_, np.bool_, False),
        ("max", fp8e4m3, ml_dtypes.float8_e4m3fn, -448.0),
        # hir §1.3 Reduce: abs_max is 0 (magnitudes), sum is 0.
        ("abs_max", f32, np.float32, 0.0),
        ("sum", i8, np.int8, 0),
        ("sum", bf16, ml_dtypes.bfloat16, 0.0),
    ],
)
def test_empty_reduction_returns_the_identity(kind, dtype, np_dtype, expected):
    x = np.zeros((0, 2), np_dtype)
    out = run(red((0,), True, kind), x, dtype)
    assert out.shape == (1, 2) and out.dtype == np.dtype(np_dtype)
    assert list(out.ravel().astype(np.float64)) == [float(expected)] * 2


def test_empty_mean_is_an_eval_error():
    # hir §1.3 Reduce: mean has no identity; a symbolic extent that is 0 at run time fails here.
    with pytest.raises(EvalError, match="mean over no elements"):
        run(red((0,), True, "mean"), np.zeros((0, 2), np.float32))


def test_identity_the_dtype_cannot_hold_is_an_eval_error():
    with pytest.raises(EvalError, match="f8e8m0 cannot hold"):
        reduce_identity(ReduceKind.SUM, f8e8m0)


def test_empty_other_axis_is_not_an_empty_reduction():
    out = run(red((1,), False, "mean"), np.zeros((0, 3), np.float32))
    assert out.shape == (0,)
