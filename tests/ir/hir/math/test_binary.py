"""Binary: typeinfer case tables (shapes, dtypes, scalars, storage, layouts, the seed's Partial
table on one- and two-axis meshes), its access relation, reference kernels and surface names."""

from __future__ import annotations

import islpy as isl
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_relation import AccessRelations
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.types import (
    DimVar,
    DType,
    bf16,
    bool_,
    f32,
    i8,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
    u8,
    u16,
    u32,
)
from tilefoundry.ir.types.shard import B, Partial, Split, make_mesh
from tilefoundry.rules import EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
M = DimVar("M", 1, 64)
SUM, MAX, MIN = Partial("sum"), Partial("max"), Partial("min")


t = make_tensor_type  # the shorthand the case tables use


def scalar(dtype=f32):
    """What a Python literal becomes: a rank-0 unmaterialised constant."""
    return make_tensor_type((), dtype, "umat")


def sx(shape, *attrs, dtype=f32):
    """Sharded on the one-axis mesh; Split(i) names logical axis i."""
    return make_shard_tensor_type(shape, dtype, mesh=X, attrs=attrs)


def sxy(shape, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=XY, attrs=attrs)


def rejects(match):
    return pytest.raises(VerifyError, match=match)


def case(id_, kind, lhs, rhs, expected):
    return pytest.param(kind, lhs, rhs, expected, id=id_)


SHAPES = [
    # hir §1.3 math: torch pointwise semantics (DESIGN §4.10: broadcasting accepted in HIR)
    case("same", "add", t((4, 8)), t((4, 8)), t((4, 8))),
    case("rank-extend", "add", t((8,)), t((4, 8)), t((4, 8))),
    case("size-one-both", "mul", t((4, 1)), t((1, 8)), t((4, 8))),
    case("rank-0", "sub", t(()), t((2, 3)), t((2, 3))),
    case("empty-axis", "add", t((0, 8)), t((1, 8)), t((0, 8))),
    case("symbolic", "add", t((N, 8)), t((8,)), t((N, 8))),
    case("clash", "add", t((4, 8)), t((4,)), r"Binary: operand shapes do not broadcast"),
    case("symbolic-clash", "add", t((N,)), t((M,)), r"Binary: operand shapes do not broadcast"),
]

DTYPES = [
    # hir §1.3 Binary: dtypes do not promote; both operands MUST already share a dtype
    case("mismatch", "add", t((4,), f32), t((4,), bf16), r"Binary: operand 'rhs' is bf16.*cast"),
    case("int-mismatch", "add", t((4,), i32), t((4,), i64), r"no implicit promotion"),
    # comparisons give bool; and/or need bool
    case("cmp-bool", "lt", t((4,), i32), t((4,), i32), t((4,), bool_)),
    case("eq-on-bool", "eq", t((4,), bool_), t((4,), bool_), t((4,), bool_)),
    case("and", "and", t((4,), bool_), t((4,), bool_), t((4,), bool_)),
    case("or-float", "or", t((4,)), t((4,)), r"Binary: or needs bool operands"),
    case("add-bool", "add", t((4,), bool_), t((4,), bool_), r"Binary: add is arithmetic"),
    case("max-bool", "max", t((4,), bool_), t((4,), bool_), r"Binary: max is arithmetic"),
    # the seed defines div as true division and no integer div: fail closed on ints
    case("div-float", "div", t((4,), bf16), t((4,), bf16), t((4,), bf16)),
    case("div-int", "div", t((4,), i32), t((4,), i32), r"Binary: div is true division.*floor_div"),
    case("floor-div-int", "floor_div", t((4,), i32), t((4,), i32), t((4,), i32)),
    case("mod-float", "mod", t((4,)), t((4,)), t((4,))),
    case("and-int", "and", t((4,), i32), t((4,), i32), r"and needs bool.*bitwise_and combines"),
    # issue 29 item 6: the kinds StableHLO adds. pow is arithmetic on ints and floats
    case("pow-float", "pow", t((4,), bf16), t((4,), bf16), t((4,), bf16)),
    case("pow-int", "pow", t((4,), i64), t((4,), i64), t((4,), i64)),
    case("pow-bool", "pow", t((4,), bool_), t((4,), bool_), r"Binary: pow is arithmetic"),
    # bitwise kinds are StableHLO's and/or/xor: integer bits, or a bool's one bit
    case("bitwise-and", "bitwise_and", t((4,), u8), t((4,), u8), t((4,), u8)),
    case("bitwise-or-bool", "bitwise_or", t((4,), bool_), t((4,), bool_), t((4,), bool_)),
    case("bitwise-xor-f", "bitwise_xor", t((4,)), t((4,)), r"bitwise_xor needs integer or bool"),
    # shifts and trunc_div take integers only; rem is the truncated remainder of ints and floats
    case("shift-left", "shift_left", t((4,), i32), t((4,), i32), t((4,), i32)),
    case("shift-f", "shift_right_logical", t((4,)), t((4,)), r"shift_right_logical shifts int"),
    case("shift-bool", "shift_left", t((4,), bool_), t((4,), bool_), r"shift_left is arithmetic"),
    case("trunc-div", "trunc_div", t((4,), u16), t((4,), u16), t((4,), u16)),
    case("trunc-div-f", "trunc_div", t((4,)), t((4,)), r"trunc_div is integer division.*div"),
    case("rem-int", "rem", t((4,), i8), t((4,), i8), t((4,), i8)),
    case("rem-float", "rem", t((4,), f32), t((4,), f32), t((4,), f32)),
    case("shift-mismatch", "shift_left", t((4,), i32), t((4,), u32), r"no implicit promotion"),
]

SCALARS = [
    # hir §1.3 Binary: a Python float takes the other operand's float dtype; an int does not
    case("float-lit-rhs", "add", t((4,), bf16), scalar(f32), t((4,), bf16)),
    case("float-lit-lhs", "mul", scalar(f32), t((4,), bf16), t((4,), bf16)),
    case("float-lit-cmp", "lt", t((4,), bf16), scalar(f32), t((4,), bool_)),
    case("float-lit-f32", "add", t((4,)), scalar(f32), t((4,))),
    case("int-lit-i64", "add", t((4,), i64), scalar(i64), t((4,), i64)),
    case("int-lit-i32", "add", t((4,), i32), scalar(i64), r"Binary: operand 'rhs' is an integer"),
    case("int-lit-float", "add", t((4,)), scalar(i64), r"operand 'rhs' is an integer literal"),
    case("float-lit-int", "add", t((4,), i32), scalar(f32), r"no implicit promotion"),
    case("two-literals", "add", scalar(f32), scalar(f32), scalar(f32)),
    # only an unmaterialised rank-0 value is a literal
    case("gmem-rank0", "add", t((4,), bf16), t((), f32), r"no implicit promotion"),
    case("umat-rank1", "add", t((4,), bf16), t((1,), f32, "umat"), r"no implicit promotion"),
]

STORAGE = [
    # semantic-analysis §3.3: anchor on the concrete storages; umat abstains
    case("anchor-rmem", "add", t((4,), storage="rmem"), scalar(f32), t((4,), storage="rmem")),
    case("agree", "max", t((4,), storage="smem"), t((4,), storage="smem"), t((4,), storage="smem")),
    case("all-umat", "add", t((4,), storage="umat"), scalar(f32), t((4,), storage="umat")),
    case("disagree", "add", t((4,), storage="gmem"), t((4,), storage="smem"), r"different storag"),
]

LAYOUTS = [
    # semantic-analysis §3.2: the output layout follows the elementwise relation
    case("split-plain", "add", sx((8,), Split(0)), t((8,)), sx((8,), Split(0))),
    case("split-broadcast-in", "sub", sx((8,), Split(0)), t((4, 8)), sx((4, 8), Split(1))),
    case("split-rows", "mul", sx((4, 8), Split(0)), t((8,)), sx((4, 8), Split(0))),
    case("split-both", "add", sx((8,), Split(0)), sx((8,), Split(0)), sx((8,), Split(0))),
    case("split-clash", "add", sx((4, 8), Split(0)), sx((4, 8), Split(1)), r"Binary: shard prop"),
    case("replicated", "add", sx((8,), B), t((8,)), t((8,))),
    case(
        "two-axis",
        "add",
        sxy((4, 8), Split(0), Split(1)),
        sxy((4, 8), Split(0), B),
        sxy((4, 8), Split(0), Split(1)),
    ),
]

PARTIALS_ONE_AXIS = [
    # hir §1.3 Binary: ADD with both Partial passes only when both pend "sum"
    case("add-sum-sum", "add", sx((8,), SUM), sx((8,), SUM), sx((8,), SUM)),
    case("add-max-max", "add", sx((8,), MAX), sx((8,), MAX), r"'lhs' carries Partial\(max\).*sum"),
    case("add-min-min", "add", sx((8,), MIN), sx((8,), MIN), r"'lhs' carries Partial\(min\)"),
    case("add-sum-max", "add", sx((8,), SUM), sx((8,), MAX), r"'rhs' carries Partial\(max\)"),
    # ADD with one Partial and a plain/Broadcast operand: max/min pass, sum rejects
    case("add-sum-plain", "add", sx((8,), SUM), t((8,)), r"'lhs' carries Partial\(sum\).*b\)"),
    case("add-plain-sum", "add", t((8,)), sx((8,), SUM), r"'rhs' carries Partial\(sum\)"),
    case("add-max-plain", "add", sx((8,), MAX), t((8,)), sx((8,), MAX)),
    case("add-min-bcast", "add", sx((8,), MIN), sx((8,), B), sx((8,), MIN)),
    case("add-plain-max", "add", t((4, 8)), sx((8,), MAX), sx((4, 8), MAX)),
    case("add-max-literal", "add", sx((8,), MAX), scalar(f32), sx((8,), MAX)),
    case("add-max-split", "add", sx((8,), MAX), sx((8,), Split(0)), r"Partial.*Split|Split.*Par"),
    # MUL with one Partial and a plain/Broadcast operand: sum only
    case("mul-sum-plain", "mul", sx((8,), SUM), t((8,)), sx((8,), SUM)),
    case("mul-plain-sum", "mul", t((8,)), sx((8,), SUM), sx((8,), SUM)),
    case("mul-max-plain", "mul", sx((8,), MAX), t((8,)), r"'lhs' carries Partial\(max\).*sign"),
    case("mul-min-plain", "mul", t((8,)), sx((8,), MIN), r"'rhs' carries Partial\(min\)"),
    # every other combination rejects, including MUL with both operands Partial
    case("mul-sum-sum", "mul", sx((8,), SUM), sx((8,), SUM), r"'rhs' carries.*two pending"),
    case("sub-sum-sum", "sub", sx((8,), SUM), sx((8,), SUM), r"kind .sub. is not proven"),
    case("sub-max-plain", "sub", sx((8,), MAX), t((8,)), r"'lhs' carries Partial\(max\)"),
    case("div-sum-plain", "div", sx((8,), SUM), t((8,)), r"kind .div. is not proven"),
    case("max-max-plain", "max", sx((8,), MAX), t((8,)), r"kind .max. is not proven"),
    case("min-min-min", "min", sx((8,), MIN), sx((8,), MIN), r"kind .min. is not proven"),
    case("lt-max-plain", "lt", sx((8,), MAX), t((8,)), r"kind .lt. is not proven"),
    case("and-sum", "and", t((8,), bool_), sx((8,), SUM, dtype=bool_), r"'rhs'.*kind 'and' is not"),
    # DESIGN §4.6: a kind the seed's table does not list rejects every Partial
    *[
        case(f"{k}-{r.reduction}", k, sx((8,), r, dtype=i32), t((8,), i32), rf"kind '{k}' is not")
        for k in ("pow", "bitwise_and", "bitwise_xor", "shift_left", "trunc_div", "rem")
        for r in (SUM, MAX, MIN)
    ],
    case(
        "shift-sum-rhs", "shift_right_arithmetic", t((8,), i32), sx((8,), SUM, dtype=i32), r"'rhs'"
    ),
]

PARTIALS_TWO_AXES = [
    # decisions are per mesh axis; ADD rejects two Partials on different mesh axes (DESIGN §4.6)
    case(
        "add-sum-diff-axes",
        "add",
        sxy((8,), SUM, B),
        sxy((8,), B, SUM),
        r"'lhs' carries Partial\(sum\) on mesh axis 0 \('x'\), and 'rhs' is not Partial there",
    ),
    case(
        "add-max-diff-axes",
        "add",
        sxy((8,), MAX, B),
        sxy((8,), B, MAX),
        r"same mesh axes; insert reshard\(lhs, \.\.\.\) to Broadcast on mesh axis 0",
    ),
    case("add-sum-both-axes", "add", sxy((8,), SUM, SUM), sxy((8,), SUM, SUM), sxy((8,), SUM, SUM)),
    case(
        "add-sum-with-split",
        "add",
        sxy((4, 8), SUM, Split(1)),
        sxy((4, 8), SUM, Split(1)),
        sxy((4, 8), SUM, Split(1)),
    ),
    case(
        "add-max-split-plain",
        "add",
        sxy((8, 4), MAX, Split(0)),
        t((8, 4)),
        sxy((8, 4), MAX, Split(0)),
    ),
    case(
        "add-sum-on-y",
        "add",
        sxy((8,), B, SUM),
        t((8,)),
        r"'lhs' carries Partial\(sum\) on mesh axis 1 \('y'\).*reshard\(lhs, \.\.\.\) to "
        r"Broadcast on mesh axis 1 \('y'\)",
    ),
    case("mul-two-axes", "mul", sxy((8,), SUM, B), sxy((8,), B, SUM), r"two pending values"),
    case("mul-sum-on-y", "mul", sxy((4, 8), Split(0), SUM), t((8,)), sxy((4, 8), Split(0), SUM)),
    case(
        "mul-sum-other-split",
        "mul",
        sxy((8,), SUM, B),
        sxy((8,), B, Split(0)),
        sxy((8,), SUM, Split(0)),
    ),
    case("mul-mixed-reductions", "mul", sxy((8,), SUM, MAX), t((8,)), r"mesh axis 1 \('y'\)"),
]


@pytest.mark.parametrize(
    ("kind", "lhs", "rhs", "expected"),
    SHAPES + DTYPES + SCALARS + STORAGE + LAYOUTS + PARTIALS_ONE_AXIS + PARTIALS_TWO_AXES,
)
def test_typeinfer(kind, lhs, rhs, expected):
    op = Binary(kind=kind)
    if isinstance(expected, str):
        with rejects(expected):
            typeinfer_call(op, lhs, rhs)
    else:
        assert typeinfer_call(op, lhs, rhs) == expected


def test_refusal_names_op_operand_axis_and_remedy():
    with rejects(r"^Binary: operand 'rhs' carries Partial\(sum\) on mesh axis 0 \('x'\).*") as e:
        typeinfer_call(Binary(kind="add"), t((8,)), sx((8,), SUM))
    assert "insert reshard(rhs, ...) to Broadcast on mesh axis 0 ('x')" in str(e.value)


def test_kind_accepts_names_and_refuses_unknown():
    assert Binary(kind="floor_div") == Binary(kind=BinaryKind.FLOOR_DIV)
    with rejects(r"Binary: attribute 'kind': unknown BinaryKind 'power'"):
        Binary(kind="power")


def test_tuple_operand_is_refused():
    from tilefoundry.ir.types import TupleType

    with rejects(r"Binary: operand 'lhs' must be a tensor"):
        typeinfer_call(Binary(kind="add"), TupleType((t((4,)),)), t((4,)))


def test_relation_broadcasts_into_output_coordinates():
    from tilefoundry.rules import ACCESS_RELATION

    relations = ACCESS_RELATION.lookup(Binary)(Binary(kind="add"), (t((4, 1)), t((8,))))
    assert isinstance(relations, AccessRelations)
    lhs, rhs = (b.pattern.relation for b in relations.inputs)
    assert lhs.is_equal(isl.Map("{ [d0, d1] -> [d0, 0] }"))
    assert rhs.is_equal(isl.Map("{ [d0, d1] -> [d1] }"))
    assert relations.outputs[0].pattern.relation.is_equal(isl.Map("{ [d0, d1] -> [d0, d1] }"))


# ---------------------------------------------------------------------------------------------
# Reference kernel


def evaluate(kind, lhs, rhs):
    """Type the operands as the frontend would (a 0-d array is a literal) and run the kernel."""

    def type_of(a):
        return make_tensor_type(
            a.shape, DType.from_numpy(a.dtype), "umat" if a.ndim == 0 else "gmem"
        )

    op = Binary(kind=kind)
    out_type = typeinfer_call(op, type_of(lhs), type_of(rhs))
    result = EVAL.lookup(Binary)(op, (lhs, rhs), out_type)
    assert result.dtype == out_type.dtype.to_numpy()
    assert result.shape == tuple(out_type.shape)
    return result


BF16, FP8 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn


def test_floor_division_and_mod_follow_the_divisor_sign():
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    np.testing.assert_array_equal(evaluate("floor_div", a, b), [3, -4, -4, 3])
    np.testing.assert_array_equal(evaluate("mod", a, b), [1, 1, -1, -1])
    fa, fb = np.array([7.5, -7.5], np.float32), np.array([-2.0, 2.0], np.float32)
    np.testing.assert_array_equal(evaluate("mod", fa, fb), [-0.5, 0.5])
    np.testing.assert_array_equal(evaluate("floor_div", fa, fb), [-4.0, -4.0])


@pytest.mark.parametrize("kind", ["floor_div", "mod"])
def test_integer_division_by_zero_is_an_eval_error(kind):
    with pytest.raises(EvalError, match=f"Binary: integer {kind} by zero"):
        evaluate(kind, np.array([1, 2], np.int64), np.array([1, 0], np.int64))


def test_division_by_zero_on_an_empty_broadcast_divides_nothing():
    out = evaluate("floor_div", np.zeros((0, 2), np.int32), np.array([0, 1], np.int32))
    assert out.shape == (0, 2)


def test_float_division_is_true_division_and_ieee_at_zero():
    out = evaluate(
        "div", np.array([1.0, 3.0, 1.0], np.float32), np.array([2.0, 4.0, 0.0], np.float32)
    )
    np.testing.assert_array_equal(out, [0.5, 0.75, np.inf])


def test_broadcasting_kernel():
    a = np.array([[0], [10], [20]], np.int64)
    b = np.array([1, 2], np.int64)
    np.testing.assert_array_equal(evaluate("add", a, b), [[1, 2], [11, 12], [21, 22]])


def test_bf16_rounds_once_to_nearest_even():
    # 256 + 1 = 257 needs 9 significant bits; bf16 keeps 8, and the tie goes to even (256).
    a = np.array([1.0, 256.0], BF16)
    b = np.array([2.0**-8, 1.0], BF16)
    np.testing.assert_array_equal(evaluate("add", a, b).astype(np.float32), [1.0, 256.0])


def test_fp8e4m3_product_rounds_to_three_mantissa_bits():
    a = np.array([1.125, -2.0], FP8)
    out = evaluate("mul", a, a)  # 1.265625 -> 1.25 (steps of 0.125 in [1, 2))
    np.testing.assert_array_equal(out.astype(np.float32), [1.25, 4.0])


def test_float_literal_is_rounded_to_the_operand_dtype_first():
    # bf16(0.1) == 0.10009765625 != f32 0.1: only a literal rounded to bf16 first compares equal.
    x = np.array([0.1, 0.2], BF16)
    np.testing.assert_array_equal(evaluate("eq", x, np.array(0.1, np.float32)), [True, False])


def test_min_max_propagate_nan_and_comparisons_give_bool():
    a = np.array([1.0, np.nan, -0.5], np.float32)
    b = np.array([2.0, 0.0, -1.0], np.float32)
    np.testing.assert_array_equal(evaluate("min", a, b), [1.0, np.nan, -1.0])
    np.testing.assert_array_equal(evaluate("max", a, b), [2.0, np.nan, -0.5])
    np.testing.assert_array_equal(evaluate("ge", a, b), [False, False, True])
    np.testing.assert_array_equal(evaluate("ne", a, b), [True, True, True])


def test_logical_kinds():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    np.testing.assert_array_equal(evaluate("and", a, b), [True, False, False, False])
    np.testing.assert_array_equal(evaluate("or", a, b), [True, True, True, False])


@pytest.mark.parametrize("kind", ["max", "min"])
def test_max_and_min_order_negative_zero_below_positive_zero(kind):
    """StableHLO maximum/minimum (IEEE maximum/minimum): -0.0 < +0.0, in either operand order;
    numpy returns whichever operand it compared last (issue 28 item 6)."""
    a = np.array([0.0, -0.0, -0.0, 0.0], np.float32)
    b = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
    out = evaluate(kind, a, b)
    negative = [False, False, True, False] if kind == "max" else [True, True, True, False]
    np.testing.assert_array_equal(np.signbit(out), negative)
    wide = evaluate(kind, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(np.signbit(wide), negative)
    narrow = evaluate(kind, a.astype(BF16), b.astype(BF16))  # computed in f32, rounded once
    np.testing.assert_array_equal(np.signbit(narrow.astype(np.float32)), negative)


def _wrapped(value: int, bits: int) -> int:
    """A Python integer wrapped into a signed `bits`-bit two's-complement value."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def test_integer_pow_is_exact_wraps_and_truncates_negative_exponents():
    base = np.array([3, 3, -1, -1, 1, 2, -2, 0, 7], np.int64)
    exponent = np.array([41, 39, -3, -2, -5, -1, 63, 0, 0], np.int64)
    truth = [
        _wrapped(int(b) ** int(e), 64) if e >= 0 else int(1 / int(b) ** -int(e))
        for b, e in zip(base, exponent, strict=True)
    ]
    np.testing.assert_array_equal(evaluate("pow", base, exponent), truth)
    u8 = evaluate("pow", np.array([3, 2, 0], np.uint8), np.array([5, 8, 0], np.uint8))
    np.testing.assert_array_equal(u8, [243, 0, 1])  # 2**8 wraps to 0; 0**0 is 1


def test_float_pow_is_ieee_pow():
    base = np.array([-2.0, -0.0, -36.0, 4.0, 0.0], np.float32)
    exponent = np.array([2.0, 2.0, 1.1, 0.5, -1.0], np.float32)
    out = evaluate("pow", base, exponent)
    np.testing.assert_array_equal(out, [4.0, 0.0, np.nan, 2.0, np.inf])


SHIFT_CASES = [
    # (kind, dtype, lhs, amounts, expected): amounts past the width, and negative ones (read as
    # unsigned, so past the width too), give 0, or the sign fill for the arithmetic right shift
    (
        "shift_left",
        np.int32,
        [1, 1, 1, 1, -1, 3],
        [0, 31, 32, -1, 1, 30],
        [1, -(2**31), 0, 0, -2, -(2**30)],
    ),
    (
        "shift_right_arithmetic",
        np.int32,
        [-8, -8, -8, 8, 8],
        [1, 31, 32, -1, 40],
        [-4, -1, -1, 0, 0],
    ),
    ("shift_right_logical", np.int32, [-8, -8, 8, -1], [28, 32, -1, 1], [15, 0, 0, 2**31 - 1]),
    ("shift_left", np.uint8, [1, 255, 3], [7, 1, 8], [128, 254, 0]),
    # on unsigned bits the arithmetic shift still fills with the top bit (XLA and the spec agree)
    (
        "shift_right_arithmetic",
        np.uint32,
        [2**31, 2**31, 16],
        [1, 32, 2],
        [3 * 2**30, 2**32 - 1, 4],
    ),
    ("shift_right_logical", np.int64, [-1], [1], [2**63 - 1]),
]


@pytest.mark.parametrize(("kind", "dtype", "lhs", "amounts", "expected"), SHIFT_CASES)
def test_shifts(kind, dtype, lhs, amounts, expected):
    lhs, amounts = np.array(lhs).astype(dtype), np.array(amounts).astype(dtype)
    np.testing.assert_array_equal(evaluate(kind, lhs, amounts), np.array(expected).astype(dtype))


def test_truncating_division_rounds_toward_zero_and_rem_follows_the_dividend():
    a = np.array([7, -7, 7, -7, -(2**31), -(2**31)], np.int32)
    b = np.array([2, 2, -2, -2, -1, 1], np.int32)
    np.testing.assert_array_equal(evaluate("trunc_div", a, b), [3, -3, -3, 3, -(2**31), -(2**31)])
    np.testing.assert_array_equal(evaluate("rem", a, b), [1, -1, 1, -1, 0, 0])
    big = np.array([2**62 + 1, -(2**62) - 1], np.int64)  # beyond float64's integers
    np.testing.assert_array_equal(
        evaluate("trunc_div", big, np.array([3, 3], np.int64)),
        [(2**62 + 1) // 3, -((2**62 + 1) // 3)],
    )
    fa, fb = np.array([7.5, -7.5, 7.5], np.float32), np.array([2.0, 2.0, 0.0], np.float32)
    np.testing.assert_array_equal(evaluate("rem", fa, fb), [1.5, -1.5, np.nan])


@pytest.mark.parametrize("kind", ["trunc_div", "rem"])
def test_truncating_integer_division_by_zero_is_an_eval_error(kind):
    with pytest.raises(EvalError, match=f"Binary: integer {kind} by zero"):
        evaluate(kind, np.array([1, 2], np.int16), np.array([1, 0], np.int16))


def test_bitwise_kinds_on_integers_and_bools():
    a, b = np.array([12, -1, 0], np.int16), np.array([10, 5, -1], np.int16)
    np.testing.assert_array_equal(evaluate("bitwise_and", a, b), [8, 5, 0])
    np.testing.assert_array_equal(evaluate("bitwise_or", a, b), [14, -1, -1])
    np.testing.assert_array_equal(evaluate("bitwise_xor", a, b), [6, -6, -1])
    t_f = np.array([True, True, False]), np.array([True, False, False])
    np.testing.assert_array_equal(evaluate("bitwise_xor", *t_f), [False, True, False])


def test_integer_overflow_wraps_like_torch():
    big = np.array([2**31 - 1], np.int32)
    np.testing.assert_array_equal(evaluate("add", big, np.array([1], np.int32)), [-(2**31)])


# ---------------------------------------------------------------------------------------------
# Surface names (DESIGN §3)

SURFACE = {
    "add": BinaryKind.ADD,
    "sub": BinaryKind.SUB,
    "mul": BinaryKind.MUL,
    "div": BinaryKind.DIV,
    "floor_div": BinaryKind.FLOOR_DIV,
    "mod": BinaryKind.MOD,
    "minimum": BinaryKind.MIN,
    "maximum": BinaryKind.MAX,
    "cmp_eq": BinaryKind.EQ,
    "cmp_ne": BinaryKind.NE,
    "cmp_lt": BinaryKind.LT,
    "cmp_le": BinaryKind.LE,
    "cmp_gt": BinaryKind.GT,
    "cmp_ge": BinaryKind.GE,
    "logical_and": BinaryKind.AND,
    "logical_or": BinaryKind.OR,
    "pow": BinaryKind.POW,
    "bitwise_and": BinaryKind.BITWISE_AND,
    "bitwise_or": BinaryKind.BITWISE_OR,
    "bitwise_xor": BinaryKind.BITWISE_XOR,
    "shift_left": BinaryKind.SHIFT_LEFT,
    "shift_right_arithmetic": BinaryKind.SHIFT_RIGHT_ARITHMETIC,
    "shift_right_logical": BinaryKind.SHIFT_RIGHT_LOGICAL,
    "trunc_div": BinaryKind.TRUNC_DIV,
    "rem": BinaryKind.REM,
}


def test_every_kind_has_one_surface_name():
    assert sorted(SURFACE.values(), key=lambda k: k.value) == sorted(
        BinaryKind, key=lambda k: k.value
    )


@pytest.mark.parametrize(("name", "kind"), SURFACE.items())
def test_surface_names(name, kind):
    entry = surface_entry(name)
    assert entry.op_class is Binary
    assert entry.fixed == {"kind": kind}


# ---------------------------------------------------------------------------------------------
# The integer kinds against Python's unbounded integers (StableHLO's definitions, wrapped)


def _signed(value: int, bits: int) -> int:
    value %= 1 << bits
    return value - (1 << bits) if value >> (bits - 1) else value


def _python_kind(kind: str, a: int, b: int, bits: int, signed: bool) -> int:
    """StableHLO's integer `kind` on Python integers, the result wrapped to `bits`."""
    wrap = (lambda v: _signed(v, bits)) if signed else (lambda v: v % (1 << bits))
    amount = b % (1 << bits)  # a shift amount reads as unsigned
    if kind in ("trunc_div", "rem"):
        quotient = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # toward zero
        return wrap(quotient if kind == "trunc_div" else a - b * quotient)
    if kind == "shift_left":
        return wrap(a << amount) if amount < bits else 0
    if kind == "shift_right_logical":
        return wrap((a % (1 << bits)) >> amount) if amount < bits else 0
    if kind == "shift_right_arithmetic":
        return wrap(_signed(a, bits) >> min(amount, bits - 1))
    if kind == "pow":
        if b < 0:
            return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
        return wrap(pow(a, b, 1 << bits))
    operator = {"bitwise_and": int.__and__, "bitwise_or": int.__or__, "bitwise_xor": int.__xor__}
    return wrap(operator[kind](a, b))


INTEGER_KINDS = [
    "trunc_div",
    "rem",
    "shift_left",
    "shift_right_logical",
    "shift_right_arithmetic",
    "pow",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
]


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(INTEGER_KINDS),
    dtype=st.sampled_from([np.int8, np.int32, np.int64, np.uint8, np.uint16, np.uint64]),
    data=st.data(),
)
def test_integer_kinds_are_python_integers_wrapped(kind, dtype, data):
    info = np.iinfo(dtype)
    values = st.integers(int(info.min), int(info.max))
    small = st.integers(max(int(info.min), -70), min(int(info.max), 70))
    lhs = data.draw(st.lists(values, min_size=1, max_size=6))
    rhs_values = small if kind in ("pow", "shift_left", "shift_right_logical") else values
    rhs = data.draw(st.lists(rhs_values, min_size=len(lhs), max_size=len(lhs)))
    if kind in ("trunc_div", "rem"):
        rhs = [b or 1 for b in rhs]
    bits, signed = info.bits, info.min < 0
    want = [_python_kind(kind, a, b, bits, signed) for a, b in zip(lhs, rhs, strict=True)]
    got = evaluate(kind, np.array(lhs, dtype), np.array(rhs, dtype))
    np.testing.assert_array_equal(got, np.array(want, dtype))
