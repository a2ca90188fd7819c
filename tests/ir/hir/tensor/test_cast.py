"""Cast: typeinfer case table (identity in shape/storage/layout, Partial refusals), the dtype
attribute, reference kernels over the narrow formats, and the evaluator's dtype support set."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from support.functions import call, function_of
from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate as evaluate_function
from tilefoundry.evaluator.dtypes import SUPPORTED_DTYPES
from tilefoundry.ir.hir.tensor.cast import Cast, widens_exactly
from tilefoundry.ir.types import (
    DimVar,
    DType,
    bf16,
    bool_,
    f4e2m1,
    f8e8m0,
    f16,
    f32,
    f64,
    fp8e4m3,
    i8,
    i16,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
    u16,
    u32,
    u64,
)
from tilefoundry.ir.types.shard import B, Layout, Partial, Split, make_mesh
from tilefoundry.rules import EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
SUM, MAX, MIN = Partial("sum"), Partial("max"), Partial("min")


t = make_tensor_type  # the shorthand the case tables use


def sx(shape, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=X, attrs=attrs)


def sxy(shape, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=XY, attrs=attrs)


def case(id_, dtype, x, expected):
    return pytest.param(dtype, x, expected, id=id_)


CASES = [
    # hir §1.3 Cast: identity in shape / storage / layout; only the element dtype changes
    case("to-bf16", bf16, t((4, 8)), t((4, 8), bf16)),
    case("by-name", "fp8e4m3", t((4,)), t((4,), fp8e4m3)),
    case("from-fp8", f32, t((4,), fp8e4m3), t((4,), f32)),
    case("to-f4e2m1", f4e2m1, t((4,)), t((4,), f4e2m1)),
    case("to-bool", bool_, t((4,), i32), t((4,), bool_)),
    case("rank-0-umat", i64, t((), f32, "umat"), t((), i64, "umat")),
    case("symbolic", f16, t((N, 2)), t((N, 2), f16)),
    case("smem", i32, t((4,), storage="smem"), t((4,), i32, "smem")),
    case(
        "strided-layout",
        bf16,
        t((4, 2), layout=Layout((4, 2), (1, 4))),
        t((4, 2), bf16, layout=Layout((4, 2), (1, 4))),
    ),
    # a ShardLayout input keeps its layout (the relation is the identity), replicated included
    case("split", bf16, sx((8,), Split(0)), sx((8,), Split(0), dtype=bf16)),
    case("replicated", bf16, sx((8,), B), sx((8,), B, dtype=bf16)),
    case(
        "split-2d", i32, sxy((4, 8), Split(1), Split(0)), sxy((4, 8), Split(1), Split(0), dtype=i32)
    ),
    # the seed states no commutation for Cast (rounding/wrapping is not linear): reject Partials
    case("sum", bf16, sx((8,), SUM), r"^Cast: operand 'x' carries Partial\(sum\) on mesh axis 0"),
    case("max", i32, sx((8,), MAX), r"Cast: operand 'x' carries Partial\(max\).*f32 -> i32"),
    case("min", f16, sx((8,), MIN), r"carries Partial\(min\).*reshard\(x, \.\.\.\) to Broadcast"),
    case("sum-on-y", bf16, sxy((4, 8), Split(0), SUM), r"Partial\(sum\) on mesh axis 1 \('y'\)"),
    # a cast to the operand's own dtype is the identity, which commutes with every reduction
    case("identity-sum", f32, sx((8,), SUM), sx((8,), SUM)),
    case("identity-max", f32, sxy((8,), MAX, SUM), sxy((8,), MAX, SUM)),
    # issue 29: an exact widening holds every value, so the widened addends sum (max, min) to
    # the widened value: the fp32 all-reduce of a bf16 partial
    case("bf16-f32-sum", f32, sx((8,), SUM, dtype=bf16), sx((8,), SUM)),
    case("f16-f32-max", f32, sx((8,), MAX, dtype=f16), sx((8,), MAX)),
    case("f32-f64-sum", f64, sxy((4, 8), SUM, MIN), sxy((4, 8), SUM, MIN, dtype=f64)),
    case("fp8-f16-sum", f16, sx((8,), SUM, dtype=fp8e4m3), sx((8,), SUM, dtype=f16)),
    case("fp8-bf16-min", bf16, sx((8,), MIN, dtype=fp8e4m3), sx((8,), MIN, dtype=bf16)),
    case("i32-i64-max", i64, sx((8,), MAX, dtype=i32), sx((8,), MAX, dtype=i64)),
    case("u8-i16-min", i16, sx((8,), MIN, dtype=u8), sx((8,), MIN, dtype=i16)),
    case("u8-u16-max", u16, sx((8,), MAX, dtype=u8), sx((8,), MAX, dtype=u16)),
    # an integer sum wraps at the narrow range and the wide sum does not: max/min only
    case("i32-i64-sum", i64, sx((8,), SUM, dtype=i32), r"sum of i32 wraps at i32's range.*max/min"),
    # narrowing, or a format missing bits of the other, rounds or wraps some values
    case("f32-bf16-max", bf16, sx((8,), MAX), r"f32 -> bf16 rounds or wraps.*f32 -> f64\)"),
    case("f16-bf16-sum", bf16, sx((8,), SUM, dtype=f16), r"f16 -> bf16 rounds or wraps"),
    case("bf16-f16-max", f16, sx((8,), MAX, dtype=bf16), r"bf16 -> f16 rounds or wraps"),
    case("i8-u16-max", u16, sx((8,), MAX, dtype=i8), r"i8 -> u16 rounds or wraps"),
    case("i64-i32-min", i32, sx((8,), MIN, dtype=i64), r"i64 -> i32 .*e\.g\. i64 -> i64"),
    case("i32-f64-max", f64, sx((8,), MAX, dtype=i32), r"i32 -> f64 rounds or wraps"),
]


@pytest.mark.parametrize(("dtype", "x", "expected"), CASES)
def test_typeinfer(dtype, x, expected):
    op = Cast(dtype=dtype)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x)
        return
    assert typeinfer_call(op, x) == expected


def test_dtype_attribute_takes_a_dtype_or_its_name_only():
    assert Cast(dtype="bf16") == Cast(dtype=bf16)
    with pytest.raises(VerifyError, match=r"Cast: attribute 'dtype': .*unknown dtype name 'float'"):
        Cast(dtype="float")
    with pytest.raises(VerifyError, match=r"Cast: attribute 'dtype'"):
        Cast(dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Reference kernel


def evaluate(dtype, x):
    op = Cast(dtype=dtype)
    out_type = typeinfer_call(op, make_tensor_type(x.shape, DType.from_numpy(x.dtype)))
    result = EVAL.lookup(Cast)(op, (x,), out_type)
    assert result.dtype == out_type.dtype.to_numpy()
    assert result.shape == x.shape
    return result


BF16, FP8, E8M0 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu


def test_float_to_int_truncates_toward_zero():
    x = np.array([1.7, -1.7, 2.0, -0.5], np.float32)
    np.testing.assert_array_equal(evaluate(i32, x), [1, -1, 2, 0])


def test_f32_to_bf16_rounds_to_nearest_even():
    # bf16 steps are 2**-7 in [1, 2): 1 + 2**-8 ties down to 1, 1 + 3 * 2**-8 ties up to 1 + 2**-6
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32)
    np.testing.assert_array_equal(evaluate(bf16, x).astype(np.float32), [1.0, 1.015625])


def test_f32_to_fp8e4m3_rounds_to_three_mantissa_bits():
    # 0.3 lies between 0.28125 and 0.3125 (steps of 2**-5 in [0.25, 0.5)); 300 -> 288 (steps of 32)
    x = np.array([0.3, 300.0, -1.0], np.float32)
    np.testing.assert_array_equal(evaluate(fp8e4m3, x).astype(np.float32), [0.3125, 288.0, -1.0])


def test_narrow_floats_widen_exactly():
    x = np.array([0.3125, -448.0], FP8)
    np.testing.assert_array_equal(evaluate(f32, x), [0.3125, -448.0])
    np.testing.assert_array_equal(evaluate(f32, np.array([2.71875], BF16)), [2.71875])


def test_powers_of_two_convert_to_f8e8m0():
    x = np.array([4.0, 0.125], np.float32)
    np.testing.assert_array_equal(evaluate(f8e8m0, x).astype(np.float32), [4.0, 0.125])


def test_bool_conversions():
    x = np.array([0.0, -0.0, 2.5, np.nan], np.float32)
    np.testing.assert_array_equal(evaluate(bool_, x), [False, False, True, True])
    np.testing.assert_array_equal(evaluate(f32, np.array([True, False])), [1.0, 0.0])


def test_wide_int_to_f32_rounds():
    x = np.array([2**24 + 1, -3], np.int64)
    np.testing.assert_array_equal(evaluate(f32, x), [16777216.0, -3.0])


def test_empty_input():
    assert evaluate(bf16, np.zeros((0, 2), np.float32)).shape == (0, 2)


def _cast_function(source: DType, target: DType):
    return function_of({"x": t((4,), source)}, lambda x: call(Cast(dtype=target), x))


def test_the_evaluator_refuses_a_cast_to_a_dtype_outside_its_table():
    """DESIGN §4.9: the evaluator's one dtype table (evaluator/dtypes.py) lacks f4e2m1, the seed's
    example of an unsupported evaluation dtype (hir §1.3 Cast); the call is refused, named."""
    with pytest.raises(UnsupportedError, match=r"Cast: dtype f4e2m1 is not supported by the ref"):
        evaluate_function(_cast_function(f32, f4e2m1), np.zeros(4, np.float32))


@pytest.mark.parametrize("target", sorted(SUPPORTED_DTYPES, key=str), ids=str)
@pytest.mark.parametrize("source", [f32, f64, i64, u64], ids=str)
def test_the_evaluator_casts_to_every_dtype_its_table_lists(source, target):
    """Issue 28 item 6: the table listed f64 and u64 (and i8/i16/u8/u16/u32) while Cast refused
    them, even f64 -> f64."""
    values = [1, 2, 4, 8]  # held exactly by every dtype (f8e8m0 holds powers of two only)
    x = np.array(values).astype(source.to_numpy())
    out = evaluate_function(_cast_function(source, target), x)
    assert out.dtype == np.dtype(target.to_numpy())
    want = [True] * 4 if target == bool_ else values
    np.testing.assert_array_equal(out.astype(np.float64), np.array(want, np.float64))


def test_surface_name():
    entry = surface_entry("cast")
    assert entry.op_class is Cast
    assert entry.fixed == {}


# ---------------------------------------------------------------------------------------------
# Exact widening (issue 29): the predicate against every value of the small formats


NARROW_FLOATS = (f16, bf16, fp8e4m3, f8e8m0, f4e2m1)
FLOATS = (*NARROW_FLOATS, f32, f64)
INTS = (i8, i16, i32, i64, u8, u16, u32, u64)


def every_value(dtype) -> np.ndarray:
    """Each bit pattern of a format of at most 16 bits (f4e2m1: in one byte's low bits), read
    as that format, NaNs dropped."""
    patterns = np.arange(2**dtype.bits, dtype=np.uint16 if dtype.bits > 8 else np.uint8)
    values = patterns.view(np.dtype(dtype.to_numpy()))
    with np.errstate(invalid="ignore"):
        return values[~np.isnan(values.astype(np.float64))]


@pytest.mark.parametrize("target", FLOATS, ids=str)
@pytest.mark.parametrize("source", NARROW_FLOATS, ids=str)
def test_a_float_widening_holds_every_value_exactly(source, target):
    values = every_value(source)
    with np.errstate(invalid="ignore", over="ignore"):
        there = values.astype(target.to_numpy())
        exact = np.array_equal(there.astype(np.float64), values.astype(np.float64))
    assert widens_exactly(source, target) == exact


@pytest.mark.parametrize("target", INTS, ids=str)
@pytest.mark.parametrize("source", INTS, ids=str)
def test_an_integer_widening_is_a_range_inside_the_target(source, target):
    held, into = np.iinfo(source.to_numpy()), np.iinfo(target.to_numpy())
    assert widens_exactly(source, target) == (into.min <= held.min and held.max <= into.max)


def test_ints_and_floats_never_widen_into_each_other():
    assert not any(widens_exactly(a, b) or widens_exactly(b, a) for a in INTS for b in FLOATS)
    assert not widens_exactly(bool_, i32) and not widens_exactly(f32, bool_)


def test_why_an_integer_widening_does_not_carry_a_sum():
    """Two i32 addends whose i32 sum wraps: widening after the sum (what a reshard of the i32
    partial then a cast computes) differs from summing the widened addends."""
    addends = np.array([2**31 - 1, 1], np.int32)
    wrapped = addends.sum(dtype=np.int32).astype(np.int64)
    widened = addends.astype(np.int64).sum()
    assert wrapped == -(2**31) and widened == 2**31
