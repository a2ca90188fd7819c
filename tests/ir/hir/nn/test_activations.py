"""ReLU / Sigmoid / Tanh / Gelu / Silu: typeinfer case tables and reference kernels."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.nn.activations import Gelu, ReLU, Sigmoid, Silu, Tanh
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    bool_,
    f32,
    fp8e4m3,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Layout, Partial, Split, make_mesh
from tilefoundry.rules import EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
ALL = (ReLU(), Sigmoid(), Tanh(), Gelu(), Silu())
MONOTONE = (ReLU(), Sigmoid(), Tanh())
NOT_MONOTONE = (Gelu(), Silu())


def sharded(shape, attrs, mesh=M1, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def check(op, args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, *args)
    else:
        assert typeinfer_call(op, *args) == expected


# hir §1.3 Gelu / Silu: "Elementwise: the output type, shape, and layout are x's" (and likewise for
# the consensus activations): dtype, symbolic shape, storage, plain and sharded layouts carry.
KEEPS_TYPE = [
    make_tensor_type((8, 16), f32),
    make_tensor_type((N, 3), bf16, "smem"),
    make_tensor_type((), f32),
    make_tensor_type((0, 5), f32),
    make_tensor_type((4, 2), f32, layout=Layout((4, 2), (1, 4))),
    sharded((8, 16), (Split(0),)),
    sharded((8, 16), (Split(1), Broadcast()), M2),
]


@pytest.mark.parametrize("op", ALL, ids=repr)
@pytest.mark.parametrize("x", KEEPS_TYPE, ids=str)
def test_output_type_is_x_type(op, x):
    check(op, [x], x)


# hir §1.3 nn: "ReLU / Sigmoid / Tanh are monotone non-decreasing elementwise, so they commute
# with max / min but not sum."
@pytest.mark.parametrize("op", MONOTONE, ids=repr)
@pytest.mark.parametrize(
    "x",
    [
        sharded((8, 16), (Partial("max"),)),
        sharded((8, 16), (Partial("min"),)),
        sharded((8, 16), (Split(0), Partial("max")), M2),
        sharded((8, 16), (Partial("min"), Partial("max")), M2),
    ],
    ids=str,
)
def test_monotone_activation_carries_max_min(op, x):
    check(op, [x], x)


@pytest.mark.parametrize("op", MONOTONE, ids=repr)
@pytest.mark.parametrize(
    "x, axis",
    [
        (sharded((8, 16), (Partial("sum"),)), r"mesh axis 0 \('x'\)"),
        (sharded((8, 16), (Partial("max"), Partial("sum")), M2), r"mesh axis 1 \('y'\)"),
    ],
    ids=str,
)
def test_monotone_activation_rejects_sum(op, x, axis):
    name = type(op).__name__
    check(op, [x], rf"^{name}: operand 'x' carries Partial\(sum\) on {axis}.*max/min only.*reshard")


# hir §1.3 Gelu / Silu: "not monotone and commutes with no reduction; typeinfer rejects any
# Partial operand with a Reshard remedy."
@pytest.mark.parametrize("op", NOT_MONOTONE, ids=repr)
@pytest.mark.parametrize("reduction", ["sum", "max", "min"])
@pytest.mark.parametrize("mesh", [M1, M2], ids=["1-axis", "2-axis"])
def test_non_monotone_activation_rejects_every_partial(op, reduction, mesh):
    attrs = (Partial(reduction),) * mesh.rank
    name = type(op).__name__
    check(op, [sharded((8, 16), attrs, mesh)], rf"^{name}: .*Partial\({reduction}\).*no reduction")


@pytest.mark.parametrize(
    "op, x, expected",
    [
        (ReLU(), make_tensor_type((3,), i32), make_tensor_type((3,), i32)),
        (ReLU(), make_tensor_type((3,), bool_), "float or integer"),
        (Sigmoid(), make_tensor_type((3,), i32), "must be a float tensor"),
        (Tanh(), make_tensor_type((3,), i32), "must be a float tensor"),
        (Gelu(), make_tensor_type((3,), i32), "must be a float tensor"),
        (Silu(), make_tensor_type((3,), bool_), "must be a float tensor"),
        (Silu(), TupleType((make_tensor_type((3,)),)), "must be a tensor"),
    ],
)
def test_dtype_and_operand_kind(op, x, expected):
    check(op, [x], expected)


def test_gelu_refuses_other_approximations():
    # hir §1.3 Gelu names only "tanh"; anything else fails closed at construction.
    assert Gelu().approximate == "tanh"
    with pytest.raises(VerifyError, match=r"Gelu: attribute 'approximate'.*only \"tanh\""):
        Gelu(approximate="none")


def test_surface_names():
    spelled = {name: surface_entry(name).op_class for name in ("relu", "sigmoid", "tanh")}
    spelled |= {name: surface_entry(name).op_class for name in ("gelu", "silu")}
    assert spelled == {"relu": ReLU, "sigmoid": Sigmoid, "tanh": Tanh, "gelu": Gelu, "silu": Silu}


# ------------------------------------------------------------------------------------------------
# Reference kernels against values computed element by element with `math`.

VALUES = [-30.0, -3.0, -1.278, -0.5, 0.0, 0.25, 1.0, 2.5, 30.0]


def gelu_math(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def sigmoid_math(v):
    return 1.0 / (1.0 + math.exp(-v))


MATH = {
    ReLU: lambda v: max(v, 0.0),
    Sigmoid: sigmoid_math,
    Tanh: math.tanh,
    Gelu: gelu_math,
    Silu: lambda v: v * sigmoid_math(v),
}


def run(op, x):
    x = np.asarray(x)
    out_type = make_tensor_type(x.shape, _dtype_of(x))
    return EVAL.lookup(type(op))(op, (x,), out_type)


def _dtype_of(array):
    return {np.float32: f32, np.int32: i32}.get(array.dtype.type) or {
        ml_dtypes.bfloat16: bf16,
        ml_dtypes.float8_e4m3fn: fp8e4m3,
    }[array.dtype.type]


@pytest.mark.parametrize("op", ALL, ids=repr)
def test_kernel_f32(op):
    x = np.array(VALUES, np.float32).reshape(3, 3)
    expected = np.array([MATH[type(op)](float(v)) for v in x.ravel()]).reshape(3, 3)
    got = run(op, x)
    assert got.dtype == np.float32 and got.shape == (3, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op", ALL, ids=repr)
@pytest.mark.parametrize("narrow", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_kernel_narrow_float_rounds_once(op, narrow):
    # Computed wide and rounded once to the narrow dtype: the same as rounding the exact value.
    x = np.array([-3.0, -1.25, -0.5, 0.0, 0.375, 1.0, 2.5], narrow)
    expected = np.array([MATH[type(op)](float(v)) for v in x], np.float64).astype(narrow)
    got = run(op, x)
    assert got.dtype == narrow
    np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))


def test_silu_fused_differs_from_rounded_sigmoid():
    # hir §1.3 Silu: the fused form never rounds sigmoid(x) to x's dtype.
    x = np.array([0.3359375], ml_dtypes.bfloat16)
    fused = run(Silu(), x)
    exact = float(x[0]) * sigmoid_math(float(x[0]))
    decomposed = (x.astype(np.float32) * run(Sigmoid(), x).astype(np.float32)).astype(x.dtype)
    assert float(fused[0]) == float(np.array(exact).astype(ml_dtypes.bfloat16))
    assert float(fused[0]) != float(decomposed[0])


@pytest.mark.parametrize("op", ALL, ids=repr)
def test_kernel_of_a_rank_0_value(op):
    """A rank-0 value stays one (found by the finite-difference tests: sigmoid and silu wrote
    in place into numpy's scalar result of a 0-d ufunc)."""
    got = run(op, np.array(-1.278, np.float32))
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, MATH[type(op)](-1.278), rtol=1e-6)


def test_relu_integer_and_empty():
    np.testing.assert_array_equal(run(ReLU(), np.array([-2, 0, 5], np.int32)), [0, 0, 5])
    assert run(Tanh(), np.zeros((0, 4), np.float32)).shape == (0, 4)


def test_sigmoid_does_not_overflow():
    with np.errstate(over="raise", invalid="raise"):
        got = run(Sigmoid(), np.array([-1000.0, 1000.0], np.float32))
    np.testing.assert_array_equal(got, [0.0, 1.0])
