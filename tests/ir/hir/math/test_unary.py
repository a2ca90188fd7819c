"""Unary: typeinfer case tables (dtypes, layouts, storage, the seed's commutation sets on one- and
two-axis meshes), reference kernels and surface names."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.ir.types import (
    DimVar,
    DType,
    bf16,
    bool_,
    f32,
    fp8e4m3,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
)
from tilefoundry.ir.types.shard import B, Partial, Split, make_mesh
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


def case(id_, kind, x, expected):
    return pytest.param(kind, x, expected, id=id_)


TYPES = [
    # hir §1.3 Unary: pointwise, the output has x's shape and dtype (no promotion)
    case("exp", "exp", t((4, 8)), t((4, 8))),
    case("exp-bf16", "exp", t((4,), bf16), t((4,), bf16)),
    case("log2-fp8", "log2", t((4,), fp8e4m3), t((4,), fp8e4m3)),
    case("rank-0", "rsqrt", t(()), t(())),
    case("empty", "exp2", t((0, 3)), t((0, 3))),
    case("symbolic", "square", t((N, 4)), t((N, 4))),
    case("neg-int", "neg", t((4,), i32), t((4,), i32)),
    case("abs-uint", "abs", t((4,), u8), t((4,), u8)),
    case("ceil-int", "ceil", t((4,), i64), t((4,), i64)),
    case("relu-int", "relu", t((4,), i32), t((4,), i32)),
    # transcendental kinds have no integer form without promotion: fail closed
    case("exp-int", "exp", t((4,), i32), r"Unary: exp needs a float operand, got i32.*cast"),
    case("rsqrt-int", "rsqrt", t((4,), i64), r"Unary: rsqrt needs a float operand"),
    # logical_not needs bool; arithmetic kinds refuse bool
    case("not", "not", t((4,), bool_), t((4,), bool_)),
    case("not-float", "not", t((4,)), r"Unary: logical_not needs a bool operand, got f32"),
    case("neg-bool", "neg", t((4,), bool_), r"Unary: neg is arithmetic"),
    case("round-bool", "round", t((4,), bool_), r"Unary: round is arithmetic"),
    case("not-int", "not", t((4,), i32), r"logical_not needs a bool.*bitwise_not inverts"),
    # issue 29 item 6: the kinds StableHLO adds; sqrt/expm1/log1p/erf/is_finite are float-only
    case("sqrt", "sqrt", t((4,), bf16), t((4,), bf16)),
    case("sqrt-int", "sqrt", t((4,), i32), r"Unary: sqrt needs a float operand, got i32"),
    case("expm1", "expm1", t((4,)), t((4,))),
    case("log1p-int", "log1p", t((4,), i64), r"Unary: log1p needs a float operand"),
    case("erf-fp8", "erf", t((4,), fp8e4m3), t((4,), fp8e4m3)),
    case("erf-int", "erf", t((4,), u8), r"Unary: erf needs a float operand, got u8"),
    case("is-finite", "is_finite", t((4,), bf16), t((4,), bool_)),
    case("is-finite-split", "is_finite", sx((8,), Split(0)), sx((8,), Split(0), dtype=bool_)),
    case("is-finite-int", "is_finite", t((4,), i32), r"Unary: is_finite needs a float operand"),
    case("sign-int", "sign", t((4,), i32), t((4,), i32)),
    case("sign-uint", "sign", t((4,), u8), t((4,), u8)),
    case("sign-bool", "sign", t((4,), bool_), r"Unary: sign is arithmetic"),
    case("round-half-away-int", "round_half_away", t((4,), i64), t((4,), i64)),
    # bitwise_not is StableHLO's not: integer bits, or a bool's one bit
    case("bitwise-not", "bitwise_not", t((4,), i32), t((4,), i32)),
    case("bitwise-not-bool", "bitwise_not", t((4,), bool_), t((4,), bool_)),
    case("bitwise-not-float", "bitwise_not", t((4,)), r"bitwise_not needs an integer or bool"),
    # semantic-analysis §3.3: storage follows the one operand, umat included
    case("rmem", "exp", t((4,), storage="rmem"), t((4,), storage="rmem")),
    case("umat", "neg", t((), storage="umat"), t((), storage="umat")),
    # semantic-analysis §3.2: an elementwise relation carries every Split
    case("split", "exp", sx((8,), Split(0)), sx((8,), Split(0))),
    case("split-2d", "abs", sxy((4, 8), Split(0), Split(1)), sxy((4, 8), Split(0), Split(1))),
    case("replicated", "exp", sx((8,), B), t((8,))),
]

_MONOTONE = ["exp", "relu", "ceil", "round", "exp2", "sign", "expm1", "erf", "round_half_away"]
_MONOTONE_ON_DOMAIN = ["log", "log2", "sqrt", "log1p"]
_NO_COMMUTE = ["abs", "square", "rsqrt"]

PARTIALS = (
    # hir §1.3 Unary: exp/relu/ceil/round/exp2 are monotone non-decreasing, so they commute with
    # max/min but not sum; so are sign (-1, 0, 1 in order, NaN stays NaN), expm1, erf and
    # round_half_away
    [case(f"{k}-max", k, sx((8,), MAX), sx((8,), MAX)) for k in _MONOTONE]
    + [case(f"{k}-min", k, sx((8,), MIN), sx((8,), MIN)) for k in _MONOTONE]
    + [case(f"{k}-sum", k, sx((8,), SUM), rf"{k} is monotone.*max/min only") for k in _MONOTONE]
    # log/log2/sqrt/log1p are monotone on their domain only (see the log-max rows below): min only
    + [case(f"{k}-min", k, sx((8,), MIN), sx((8,), MIN)) for k in _MONOTONE_ON_DOMAIN]
    + [case(f"{k}-sum", k, sx((8,), SUM), rf"{k} .*min only") for k in _MONOTONE_ON_DOMAIN]
    # neg is linear, so it commutes with sum but not max/min (negation reverses order)
    + [
        case("neg-sum", "neg", sx((8,), SUM), sx((8,), SUM)),
        case("neg-max", "neg", sx((8,), MAX), r"Partial\(max\).*neg is linear.*sum only"),
        case("neg-min", "neg", sx((8,), MIN), r"Partial\(min\).*reverses order"),
    ]
    # abs/square/rsqrt/logical_not commute with no reduction
    + [
        case(f"{k}-{r.reduction}", k, sx((8,), r), rf"{k} is not proven to commute")
        for k in _NO_COMMUTE
        for r in (SUM, MAX, MIN)
    ]
    + [
        case(f"not-{r.reduction}", "not", sx((8,), r, dtype=bool_), r"not is not proven")
        for r in (SUM, MAX, MIN)
    ]
    # is_finite is not monotone (both infinities are false); bitwise_not reverses order
    + [
        case(f"is_finite-{r.reduction}", "is_finite", sx((8,), r), r"-inf and \+inf both give")
        for r in (SUM, MAX, MIN)
    ]
    + [
        case(f"bitwise_not-{r.reduction}", "bitwise_not", sx((8,), r, dtype=i32), r"reverses order")
        for r in (SUM, MAX, MIN)
    ]
    + [case("sign-max-int", "sign", sx((8,), MAX, dtype=i32), sx((8,), MAX, dtype=i32))]
    # decisions per mesh axis, each Partial kept at its own mesh-axis index
    + [
        case("exp-max-split", "exp", sxy((8, 4), MAX, Split(0)), sxy((8, 4), MAX, Split(0))),
        case("neg-split-sum", "neg", sxy((4, 8), Split(0), SUM), sxy((4, 8), Split(0), SUM)),
        # log is monotone only on its domain: a non-maximal Partial(max) addend may be <= 0 and
        # NaN wins a max (found by the sharding-rule validator), so log carries min only
        case("log-min-min", "log", sxy((8,), MIN, MIN), sxy((8,), MIN, MIN)),
        case("log-max", "log", sx((8,), MAX), r"log is monotone only on positive values"),
        case("log2-max", "log2", sx((8,), MAX), r"log2 is monotone only on positive values"),
        case("sqrt-max", "sqrt", sx((8,), MAX), r"sqrt is monotone only on non-negative values"),
        case("log1p-max", "log1p", sx((8,), MAX), r"log1p is monotone only on values above -1"),
        case(
            "exp-max-sum",
            "exp",
            sxy((8,), MAX, SUM),
            r"^Unary: operand 'x' carries Partial\(sum\) on mesh axis 1 \('y'\).*"
            r"insert reshard\(x, \.\.\.\) to Broadcast on mesh axis 1 \('y'\)",
        ),
        case("neg-sum-max", "neg", sxy((8,), SUM, MAX), r"Partial\(max\) on mesh axis 1"),
    ]
)


@pytest.mark.parametrize(("kind", "x", "expected"), TYPES + PARTIALS)
def test_typeinfer(kind, x, expected):
    op = Unary(kind=kind)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


def test_every_kind_has_a_commutation_row():
    covered = {p.values[0] for p in PARTIALS}
    assert covered == {k.value for k in UnaryKind}


# ---------------------------------------------------------------------------------------------
# Reference kernel

BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


def evaluate(kind, x):
    op = Unary(kind=kind)
    out_type = typeinfer_call(op, make_tensor_type(x.shape, DType.from_numpy(x.dtype)))
    result = EVAL.lookup(Unary)(op, (x,), out_type)
    assert result.dtype == out_type.dtype.to_numpy()
    assert result.shape == x.shape
    return result


def f32s(*values):
    return np.array(values, np.float32)


@pytest.mark.parametrize(
    ("kind", "x", "expected"),
    [
        ("round", f32s(0.5, 1.5, 2.5, -0.5, -1.5, 2.4), [0.0, 2.0, 2.0, -0.0, -2.0, 2.0]),
        ("ceil", f32s(-1.5, 1.2, 3.0), [-1.0, 2.0, 3.0]),
        ("exp2", f32s(3.0, -1.0), [8.0, 0.5]),
        ("log2", f32s(8.0, 0.25, 0.0), [3.0, -2.0, -np.inf]),
        ("log", f32s(1.0, 0.0), [0.0, -np.inf]),
        ("exp", f32s(0.0), [1.0]),
        ("rsqrt", f32s(4.0, 0.25, 0.0), [0.5, 2.0, np.inf]),
        ("relu", f32s(-1.0, 0.0, 2.5), [0.0, 0.0, 2.5]),
        ("square", f32s(-3.0, 0.5), [9.0, 0.25]),
        ("abs", f32s(-3.0, 2.0), [3.0, 2.0]),
        ("neg", f32s(-3.0, 2.0), [3.0, -2.0]),
        ("relu", np.array([-4, 0, 7], np.int32), [0, 0, 7]),
        ("neg", np.array([5, -2], np.int64), [-5, 2]),
        ("not", np.array([True, False]), [False, True]),
        ("sqrt", f32s(4.0, 0.0, 2.25, np.inf), [2.0, 0.0, 1.5, np.inf]),
        ("expm1", f32s(0.0, np.inf, -np.inf), [0.0, np.inf, -1.0]),
        ("log1p", f32s(0.0, -1.0, np.inf), [0.0, -np.inf, np.inf]),
        ("sign", f32s(-2.5, 3.0, np.nan, np.inf), [-1.0, 1.0, np.nan, 1.0]),
        ("sign", np.array([-7, 0, 9], np.int8), [-1, 0, 1]),
        ("sign", np.array([0, 200], np.uint8), [0, 1]),
        # half away from zero; 0.49999997 (the f32 below 0.5) is no tie, and x + 0.5 would
        # round it up to 1 in f32
        (
            "round_half_away",
            f32s(0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 2.4),
            [1, 2, 3, -1, -3, 0, 2],
        ),
        ("round_half_away", f32s(np.nan, -np.inf, 2.0**23 + 1), [np.nan, -np.inf, 2.0**23 + 1]),
        ("bitwise_not", np.array([0, -1, 127, -128], np.int8), [-1, 0, -128, 127]),
        ("bitwise_not", np.array([0, 255, 15], np.uint8), [255, 0, 240]),
        ("bitwise_not", np.array([True, False]), [False, True]),
    ],
)
def test_kernels(kind, x, expected):
    np.testing.assert_array_equal(evaluate(kind, x), np.array(expected, x.dtype))


def test_is_finite_gives_bool():
    x = f32s(np.inf, -np.inf, np.nan, -3.0, 0.0)
    out = evaluate("is_finite", x)
    np.testing.assert_array_equal(out, [False, False, False, True, True])
    assert out.dtype == np.bool_


def test_erf_is_libm_erf_rounded_once():
    import math

    x = np.array([0.5, -1.0, 3.0, 1e-30, 6.0, -np.inf, np.nan])
    truth = [math.erf(v) for v in x]
    np.testing.assert_array_equal(evaluate("erf", x), truth)
    np.testing.assert_array_equal(evaluate("erf", x.astype(np.float32)), np.float32(truth))
    bf16 = evaluate("erf", np.array([0.5], BF16))  # erf(0.5) = 0.5205 -> 0.51953125 in bf16
    np.testing.assert_array_equal(bf16.astype(np.float32), [0.51953125])


@pytest.mark.parametrize(
    ("kind", "x", "negative_zero"),
    [
        ("sign", f32s(-0.0, 0.0), [True, False]),  # StableHLO keeps the zero; np.sign does not
        ("round_half_away", f32s(-0.4, -0.0, 0.4), [True, True, False]),
        ("relu", f32s(-0.0, 0.0), [False, False]),  # max(-0, +0) is +0 (StableHLO maximum)
    ],
)
def test_the_sign_of_zero(kind, x, negative_zero):
    out = evaluate(kind, x)
    np.testing.assert_array_equal(out, np.zeros_like(x))
    np.testing.assert_array_equal(np.signbit(out), negative_zero)


@pytest.mark.parametrize("kind", ["ceil", "round", "round_half_away"])
def test_integer_ceil_and_round_are_exact_identities(kind):
    big = np.array([2**60 + 1, -(2**53) - 1], np.int64)  # not representable in float64
    np.testing.assert_array_equal(evaluate(kind, big), big)


def test_bf16_exp_rounds_once():
    # e = 2.71828...; bf16 has steps of 2**-6 in [2, 4): 2.71875 is the nearest.
    out = evaluate("exp", np.array([1.0], BF16))
    np.testing.assert_array_equal(out.astype(np.float32), [2.71875])


def test_fp8e4m3_square_rounds_to_three_mantissa_bits():
    out = evaluate("square", np.array([1.125, -1.5], FP8))  # 1.265625 -> 1.25; 2.25 exact
    np.testing.assert_array_equal(out.astype(np.float32), [1.25, 2.25])


def test_empty_input():
    assert evaluate("exp", np.zeros((0, 3), np.float32)).shape == (0, 3)


# ---------------------------------------------------------------------------------------------
# Surface names (DESIGN §3): relu is nn.ReLU's spelling, never Unary's


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("neg", UnaryKind.NEG),
        ("abs", UnaryKind.ABS),
        ("rsqrt", UnaryKind.RSQRT),
        ("logical_not", UnaryKind.NOT),
        ("square", UnaryKind.SQUARE),
        ("exp", UnaryKind.EXP),
        ("log", UnaryKind.LOG),
        ("ceil", UnaryKind.CEIL),
        ("round", UnaryKind.ROUND),
        ("exp2", UnaryKind.EXP2),
        ("log2", UnaryKind.LOG2),
        ("sqrt", UnaryKind.SQRT),
        ("sign", UnaryKind.SIGN),
        ("expm1", UnaryKind.EXPM1),
        ("log1p", UnaryKind.LOG1P),
        ("erf", UnaryKind.ERF),
        ("is_finite", UnaryKind.IS_FINITE),
        ("round_half_away", UnaryKind.ROUND_HALF_AWAY),
        ("bitwise_not", UnaryKind.BITWISE_NOT),
    ],
)
def test_surface_names(name, kind):
    entry = surface_entry(name)
    assert entry.op_class is Unary
    assert entry.fixed == {"kind": kind}


def test_relu_kind_is_reachable_only_through_the_op():
    entry = surface_entry("relu")
    assert entry is None or entry.op_class is not Unary
    assert Unary(kind="relu").kind is UnaryKind.RELU
