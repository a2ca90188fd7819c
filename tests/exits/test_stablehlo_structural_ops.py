"""The structural ops (Pad, ScatterAdd, Reverse, Cumulative, Clamp, Iota) at the StableHLO exit:
emitted, parsed and verified by jaxlib, serialised at the pinned target, run on XLA and compared
with the reference evaluator (support.stablehlo_check), over the dtypes and attributes whose
lowering differs."""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from support.stablehlo_check import check
from tilefoundry.ir.hir.math import Clamp
from tilefoundry.ir.hir.tensor import Cumulative, CumulativeKind, Iota, Pad, Reverse, ScatterAdd
from tilefoundry.ir.types import (
    DType,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i8,
    i32,
    i64,
    make_tensor_type,
    u8,
)

pytest.importorskip("jax", reason="the StableHLO toolchain tests need jax[lib]")

t = make_tensor_type


def data(shape, dtype: DType, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        low = 0 if dtype.is_unsigned else -9
        return rng.integers(low, 10, shape).astype(dtype.to_numpy())
    return np.round(rng.standard_normal(shape) * 3, 1).astype(dtype.to_numpy())


def unary(op, type_, name="f"):
    return function_of({"x": type_}, lambda x: call(op, x), name)


@pytest.mark.parametrize("dtype", [f32, bf16, i32, u8, bool_])
def test_pad_edges_interior_and_negative(dtype):
    value = True if dtype.is_bool else 3
    op = Pad(low=(1, -1), high=(2, -1), interior=(0, 1), value=value)
    check(unary(op, t((3, 5), dtype)), data((3, 5), dtype))


def test_pad_with_minus_infinity_for_a_max_pool():
    op = Pad(low=(1,), high=(1,), value=-np.inf)
    check(unary(op, t((4,), f16)), data((4,), f16))


def test_pad_of_an_empty_axis_and_a_scalar():
    check(unary(Pad(low=(2, 0), high=(1, 0), interior=(3, 0)), t((0, 2), i8)), data((0, 2), i8))
    check(unary(Pad(low=(), high=()), t((), i64)), np.array(7, np.int64))


@pytest.mark.parametrize(
    ("x_shape", "i_shape", "axis", "batch"),
    [((6, 3), (4, 2), 0, 0), ((3, 6, 2), (5,), 1, 0), ((2, 3, 6), (2, 3, 4), 2, 2),
     ((2, 6, 3), (2, 4), 1, 1), ((4,), (), 0, 0)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [f32, bf16, i32])
def test_scatter_add_axes_batches_and_duplicates(x_shape, i_shape, axis, batch, dtype):
    u_shape = (*x_shape[:axis], *i_shape[batch:], *x_shape[axis + 1 :])
    op = ScatterAdd(axis=axis, batch_dims=batch)
    fn = function_of(
        {"x": t(x_shape, dtype), "i": t(i_shape, i32), "u": t(u_shape, dtype)},
        lambda x, i, u: call(op, x, i, u),
    )
    indices = np.random.default_rng(2).integers(0, x_shape[axis], i_shape).astype(np.int32)
    check(fn, data(x_shape, dtype), indices, data(u_shape, dtype, seed=1))


@pytest.mark.parametrize("dtype", [f32, bf16, i8, bool_])
@pytest.mark.parametrize("axes", [(0,), (1, 2), ()])
def test_reverse(dtype, axes):
    check(unary(Reverse(axes=axes), t((2, 3, 4), dtype)), data((2, 3, 4), dtype))


@pytest.mark.parametrize("kind", list(CumulativeKind))
@pytest.mark.parametrize("dtype", [f32, bf16, i32, u8])
@pytest.mark.parametrize(("axis", "reverse"), [(1, False), (0, True)])
def test_cumulative(kind, dtype, axis, reverse):
    op = Cumulative(axis=axis, kind=kind, reverse=reverse)
    check(unary(op, t((4, 6), dtype)), data((4, 6), dtype))


def test_cumulative_of_an_empty_axis_and_integer_wrapping():
    check(unary(Cumulative(axis=0), t((0, 3), f32)), data((0, 3), f32))
    check(unary(Cumulative(axis=0), t((4,), i8)), np.full(4, 100, np.int8))


@pytest.mark.parametrize("dtype", [f32, bf16, i32, u8])
def test_clamp_broadcasts_its_bounds(dtype):
    fn = function_of(
        {"x": t((3, 4), dtype), "lo": t((4,), dtype), "hi": t((), dtype)},
        lambda x, lo, hi: call(Clamp(), x, lo, hi),
    )
    check(fn, data((3, 4), dtype), data((4,), dtype, seed=1), data((), dtype, seed=2))


def test_clamp_with_lo_above_hi_and_nan():
    fn = function_of(
        {"x": t((3,)), "lo": t((3,)), "hi": t((3,))}, lambda x, lo, hi: call(Clamp(), x, lo, hi)
    )
    x = np.array([np.nan, 1.0, 2.0], np.float32)
    check(fn, x, np.array([0.0, 3.0, 0.0], np.float32), np.array([1.0, 2.0, 1.0], np.float32))


@pytest.mark.parametrize(
    "attrs",
    [{"shape": (5,), "dtype": i32}, {"shape": (2, 3), "dtype": f32, "axis": 1, "step": 0.1},
     {"shape": (4,), "dtype": bf16, "start": -1.5, "step": 0.25},
     {"shape": (3,), "dtype": u8, "start": 250, "step": 3},
     {"shape": (6,), "dtype": f64, "start": 0.0, "step": 0.1}],
)  # fmt: skip
def test_iota(attrs):
    check(function_of({}, lambda: call(Iota(**attrs))))
