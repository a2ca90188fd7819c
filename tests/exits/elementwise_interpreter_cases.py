"""The StableHLO reference interpreter's own test cases for the elementwise kinds, translated
(openxla/stablehlo at 3c9301c1, `stablehlo/tests/interpret/<file>.mlir`; each table cites its file).

Operands and expected values are copied as the file writes them: a "0x..." string is the bit
pattern of a float the file spells in hex, a bare value is broadcast to the case's shape (the
file's splat `dense<v>`). Left out: the 4-bit integer (si4/ui4) and complex cases, whose dtypes
HIR does not have.

`EQ` is the file's `check.expect_eq_const`; `ALMOST` its `check.expect_almost_eq_const`, whose
default tolerance is an absolute 1e-4 (stablehlo/tests/CheckOps.td). A table marked `exact`
compares every float bit for bit (a signed zero by its sign, NaN as NaN): maximum and minimum
return one of their operands, so anything short of that result is wrong, and the file's tolerance
would hide both the sign of a zero and a flushed subnormal.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.ir.types import (
    DType,
    bf16,
    bool_,
    f16,
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
)

EQ, ALMOST = "eq", "almost"
ANY = "any"


@dataclass(frozen=True)
class Table:
    """One .mlir file's cases: each row is (func name, dtype, shape, operands, expected, check).
    `spellings` names the `tf` functions that spell the file's op, by dtype family ("bool",
    "int", "float", or ANY for the rest); `result` is the result dtype where it is not the
    operands' (is_finite's i1)."""

    source: str
    spellings: dict[str, tuple[str, ...]]
    rows: tuple[tuple, ...]
    exact: bool = False
    result: DType | None = None

    def spelled(self, dtype: DType) -> tuple[str, ...]:
        family = "bool" if dtype.is_bool else "int" if dtype.is_int else "float"
        return self.spellings.get(family) or self.spellings[ANY]


def _shared(op: str, operand_sets: tuple, expected: tuple) -> tuple:
    """The rows of a file whose case `<op>_op_test_<suffix>` runs the operand set `suffix`: its
    checks are expect_eq_const on integers and bools and expect_almost_eq_const on floats."""
    return tuple(
        (f"{op}_op_test_{suffix}", dtype, shape, operands, want, ALMOST if dtype.is_float else EQ)
        for (suffix, dtype, shape, operands), want in zip(operand_sets, expected, strict=True)
    )


# fmt: off
# and.mlir, or.mlir and xor.mlir run one set of operands per dtype, and so do maximum.mlir and
# minimum.mlir: each set is written once here, named by the files' case suffix (the case
# `and_op_test_si8` is the row "si8" of the and table).
_BITWISE_OPERANDS = (
    ("si8", i8, (3,), ([127, -128, -128], [0, 127, -128])),
    ("ui8", u8, (3,), ([0, 127, 255], 255)),
    ("si16", i16, (3,), ([32767, -32768, -32768], [0, 32767, -32768])),
    ("ui16", u16, (3,), ([0, 32767, 65535], 65535)),
    ("si32", i32, (3,), ([2147483647, -2147483648, -2147483648], [0, 2147483647, -2147483648])),
    ("ui32", u32, (3,), ([0, 2147483647, 4294967295], 4294967295)),
    ("si64", i64, (3,),
     ([9223372036854775807, -9223372036854775808, -9223372036854775808],
      [0, 9223372036854775807, -9223372036854775808])),
    ("ui64", u64, (3,), ([0, 9223372036854775807, 18446744073709551615], 18446744073709551615)),
    ("i1", bool_, (4,), ([False, False, True, True], [False, True, False, True])),
    ("i1_splat_false", bool_, (2,), (False, [False, True])),
    ("i1_splat_true", bool_, (2,), (True, [False, True])),
)

_MINMAX_OPERANDS = (
    ("si8", i8, (5,), ([0, 1, 8, -9, 0], [-128, -1, 8, -9, 127])),
    ("ui8", u8, (2,), ([0, 16], [255, 16])),
    ("si16", i16, (5,), ([0, 1, 128, -129, 0], [-32768, -1, 128, -129, 32767])),
    ("ui16", u16, (2,), ([0, 256], [65535, 256])),
    ("si32", i32, (5,), ([0, 1, 32768, -32769, 0], [-2147483648, -1, 32768, -32769, 2147483647])),
    ("ui32", u32, (2,), ([0, 65536], [4294967295, 65536])),
    ("si64", i64, (5,),
     ([0, 1, 2147483648, -2147483649, 0],
      [-9223372036854775808, -1, 2147483648, -2147483649, 9223372036854775807])),
    ("ui64", u64, (2,), ([0, 4294967296], [18446744073709551615, 4294967296])),
    ("i1", bool_, (4,), ([False, False, True, True], [False, True, False, True])),
    ("bf16", bf16, (11,),
     (["0xFF80", "0xFF80", -1.0, "0x8001", 0.0, 0.0, "0x0001", 1.0, "0x7F80", "0x7F80", "0x7FC0"],
      ["0xFF80", -1.0, "0x8001", -0.0, -0.0, "0x0001", 1.0, "0x7F80", "0x7F80", "0xFF80",
       "0x7F80"])),
    ("f16", f16, (11,),
     (["0xFC00", "0xFC00", -1.0, "0x8001", 0.0, 0.0, "0x0001", 1.0, "0x7C00", "0x7C00", "0x7E00"],
      ["0xFC00", -1.0, "0x8001", -0.0, -0.0, "0x0001", 1.0, "0x7C00", "0x7C00", "0xFC00",
       "0x7C00"])),
    ("f32", f32, (11,),
     (["0xFF800000", "0xFF800000", -1.0, "0x80000001", 0.0, 0.0, "0x00000001", 1.0, "0x7F800000",
       "0x7F800000", "0x7FC00000"],
      ["0xFF800000", -1.0, "0x80000001", -0.0, -0.0, "0x00000001", 1.0, "0x7F800000", "0x7F800000",
       "0xFF800000", "0x7F800000"])),
    ("f64", f64, (11,),
     (["0xFFF0000000000000", "0xFFF0000000000000", -1.0, "0x8000000000000001", 0.0, 0.0,
       "0x0000000000000001", 1.0, "0x7FF0000000000000", "0x7FF0000000000000",
       "0x7FF8000000000000"],
      ["0xFFF0000000000000", -1.0, "0x8000000000000001", -0.0, -0.0, "0x0000000000000001", 1.0,
       "0x7FF0000000000000", "0x7FF0000000000000", "0xFFF0000000000000", "0x7FF0000000000000"])),
)

# stablehlo/tests/interpret/sqrt.mlir
SQRT = Table(
    "sqrt.mlir",
    {ANY: ("sqrt",)},
    (
        ("square_root_op_test_f64", f64, (2, 2),
         ([0.0, 1.0, 4.0, 9.0],),
         [0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00], ALMOST),
    ),
)

# stablehlo/tests/interpret/sign.mlir
SIGN = Table(
    "sign.mlir",
    {ANY: ("sign",)},
    (
        ("sign_op_test_si64", i64, (3,), ([-1, 0, 1],), [-1, 0, 1], EQ),
        ("sign_op_test_f64", f64, (5,),
         (["0x7FFFFFFFFFFFFFFF", -1.0, -0.0, 0.0, 1.0],),
         ["0x7FFFFFFFFFFFFFFF", -1.0, -0.0, 0.0, 1.0], ALMOST),
    ),
)

# stablehlo/tests/interpret/exponential_minus_one.mlir
EXPM1 = Table(
    "exponential_minus_one.mlir",
    {ANY: ("expm1",)},
    (
        ("exponential_minus_one_op_test_f64", f64, (2,),
         ([0.0, 1.0],),
         [0.0, 1.7182818284590451], ALMOST),
    ),
)

# stablehlo/tests/interpret/log_plus_one.mlir
LOG1P = Table(
    "log_plus_one.mlir",
    {ANY: ("log1p",)},
    (
        ("log_plus_one_op_test_f64", f64, (5,),
         ([0.0, -0.999, 7.0, 6.38905621, 15.0],),
         [0.0, -6.90776825, 2.07944155, 2.0, 2.77258873], ALMOST),
    ),
)

# stablehlo/tests/interpret/is_finite.mlir
IS_FINITE = Table(
    "is_finite.mlir",
    {ANY: ("is_finite",)},
    (
        ("is_finite_op_test_f64", f64, (7,),
         (["0xFFF0000000000000", "0x7FF0000000000000", "0x7FF8000000000000", -10.0, -0.0, 0.0,
           10.0],),
         [False, False, False, True, True, True, True], EQ),
    ),
    result=bool_,
)

# stablehlo/tests/interpret/round_nearest_afz.mlir
ROUND_NEAREST_AFZ = Table(
    "round_nearest_afz.mlir",
    {ANY: ("round_half_away",)},
    (
        ("round_nearest_afz_op_test_f64", f64, (5,),
         ([-2.5, 0.4, 0.5, 0.6, 2.5],),
         [-3.0, 0.0, 1.0, 1.0, 3.0], ALMOST),
    ),
)

# stablehlo/tests/interpret/round_nearest_even.mlir
ROUND_NEAREST_EVEN = Table(
    "round_nearest_even.mlir",
    {ANY: ("round",)},
    (
        ("round_nearest_even_op_test_f64", f64, (5,),
         ([-2.5, 0.4, 0.5, 0.6, 2.5],),
         [-2.0, 0.0, 0.0, 1.0, 2.0], ALMOST),
    ),
)

# stablehlo/tests/interpret/not.mlir
NOT = Table(
    "not.mlir",
    {ANY: ("bitwise_not",), "bool": ("bitwise_not", "logical_not")},
    (
        ("not_op_test_si8", i8, (3,), ([127, -128, 0],), [-128, 127, -1], EQ),
        ("not_op_test_ui8", u8, (3,), ([0, 127, 255],), [255, 128, 0], EQ),
        ("not_op_test_si16", i16, (3,), ([32767, -32768, 0],), [-32768, 32767, -1], EQ),
        ("not_op_test_ui16", u16, (3,), ([0, 32767, 65535],), [65535, 32768, 0], EQ),
        ("not_op_test_si32", i32, (3,),
         ([2147483647, -2147483648, 0],),
         [-2147483648, 2147483647, -1], EQ),
        ("not_op_test_ui32", u32, (3,),
         ([0, 2147483647, 4294967295],),
         [4294967295, 2147483648, 0], EQ),
        ("not_op_test_si64", i64, (3,),
         ([9223372036854775807, -9223372036854775808, 0],),
         [-9223372036854775808, 9223372036854775807, -1], EQ),
        ("not_op_test_ui64", u64, (3,),
         ([0, 9223372036854775807, 18446744073709551615],),
         [18446744073709551615, 9223372036854775808, 0], EQ),
        ("not_op_test_i1", bool_, (2,), ([False, True],), [True, False], EQ),
        ("not_op_test_i1_splat_false", bool_, (), (False,), True, EQ),
        ("not_op_test_i1_splat_true", bool_, (), (True,), False, EQ),
    ),
)

# stablehlo/tests/interpret/and.mlir
AND = Table(
    "and.mlir",
    {ANY: ("bitwise_and",), "bool": ("bitwise_and", "logical_and")},
    _shared("and", _BITWISE_OPERANDS, (
        [0, 0, -128],  # si8
        [0, 127, 255],  # ui8
        [0, 0, -32768],  # si16
        [0, 32767, 65535],  # ui16
        [0, 0, -2147483648],  # si32
        [0, 2147483647, 4294967295],  # ui32
        [0, 0, -9223372036854775808],  # si64
        [0, 9223372036854775807, 18446744073709551615],  # ui64
        [False, False, False, True],  # i1
        [False, False],  # i1_splat_false
        [False, True],  # i1_splat_true
    )),
)

# stablehlo/tests/interpret/or.mlir
OR = Table(
    "or.mlir",
    {ANY: ("bitwise_or",), "bool": ("bitwise_or", "logical_or")},
    _shared("or", _BITWISE_OPERANDS, (
        [127, -1, -128],  # si8
        [255, 255, 255],  # ui8
        [32767, -1, -32768],  # si16
        [65535, 65535, 65535],  # ui16
        [2147483647, -1, -2147483648],  # si32
        [4294967295, 4294967295, 4294967295],  # ui32
        [9223372036854775807, -1, -9223372036854775808],  # si64
        [18446744073709551615, 18446744073709551615, 18446744073709551615],  # ui64
        [False, True, True, True],  # i1
        [False, True],  # i1_splat_false
        [True, True],  # i1_splat_true
    )),
)

# stablehlo/tests/interpret/xor.mlir
XOR = Table(
    "xor.mlir",
    {ANY: ("bitwise_xor",)},
    _shared("xor", _BITWISE_OPERANDS, (
        [127, -1, 0],  # si8
        [255, 128, 0],  # ui8
        [32767, -1, 0],  # si16
        [65535, 32768, 0],  # ui16
        [2147483647, -1, 0],  # si32
        [4294967295, 2147483648, 0],  # ui32
        [9223372036854775807, -1, 0],  # si64
        [18446744073709551615, 9223372036854775808, 0],  # ui64
        [False, True, True, False],  # i1
        [False, True],  # i1_splat_false
        [True, False],  # i1_splat_true
    )),
)

# stablehlo/tests/interpret/power.mlir
POWER = Table(
    "power.mlir",
    {ANY: ("pow",)},
    (
        ("power_op_test_si64", i64, (6,),
         ([-1, -1, -3, 1, -3, 0],
          [1, 0, -3, -3, 3, 2]),
         [-1, 1, 0, 1, -27, 0], EQ),
        ("power_op_test_ui64", u64, (5,),
         ([0, 0, 1, 1, 5],
          [0, 1, 0, 2, 5]),
         [1, 0, 1, 1, 3125], EQ),
        ("power_op_test_f64", f64, (6,),
         ([-2.0, -0.0, -36.0, 5.0, 3.0, 10000.0],
          [2.0, 2.0, 1.1, 2.0, -1.0, 10.0]),
         [4.000000e+00, 0.000000e+00, "0xFFF8000000000000", 2.500000e+01, 0.33333333333333331,
          1.000000e+40], ALMOST),
    ),
)

# stablehlo/tests/interpret/shift_left.mlir
SHIFT_LEFT = Table(
    "shift_left.mlir",
    {ANY: ("shift_left",)},
    (
        ("shift_left_op_test_si64", i64, (3,), ([-1, 0, 1], [1, 2, 3],), [-2, 0, 8], EQ),
    ),
)

# stablehlo/tests/interpret/shift_right_arithmetic.mlir
SHIFT_RIGHT_ARITHMETIC = Table(
    "shift_right_arithmetic.mlir",
    {ANY: ("shift_right_arithmetic",)},
    (
        ("shift_right_arithmetic_op_test_si64", i64, (3,),
         ([-1, 0, 8],
          [1, 2, 3]),
         [-1, 0, 1], EQ),
    ),
)

# stablehlo/tests/interpret/shift_right_logical.mlir
SHIFT_RIGHT_LOGICAL = Table(
    "shift_right_logical.mlir",
    {ANY: ("shift_right_logical",)},
    (
        ("shift_right_logical_op_test_si64", i64, (3,),
         ([-1, 0, 8],
          [1, 2, 3]),
         [9223372036854775807, 0, 1], EQ),
    ),
)

# stablehlo/tests/interpret/divide.mlir
DIVIDE = Table(
    "divide.mlir",
    {"int": ("trunc_div",), "float": ("div",)},
    (
        ("divide_op_test_si64", i64, (4,),
         ([17, -17, 17, -17],
          [3, 3, -3, -3]),
         [5, -5, -5, 5], EQ),
        ("divide_op_test_ui64", u64, (4,), ([17, 18, 19, 20], [3, 4, 5, 7],), [5, 4, 3, 2], EQ),
        ("divide_op_test_f64", f64, (4,),
         ([17.1, -17.1, 17.1, -17.1],
          [3.0, 3.0, -3.0, -3.0]),
         [5.700000e+00, -5.700000e+00, -5.700000e+00, 5.700000e+00], ALMOST),
    ),
)

# stablehlo/tests/interpret/remainder.mlir
REMAINDER = Table(
    "remainder.mlir",
    {ANY: ("rem",)},
    (
        ("remainder_op_test_si64", i64, (4,),
         ([17, -17, 17, -17],
          [3, 3, -3, -3]),
         [2, -2, 2, -2], EQ),
        ("remainder_op_test_ui64", u64, (4,), ([17, 18, 19, 20], [3, 4, 5, 7],), [2, 2, 4, 6], EQ),
        ("remainder_op_test_f64", f64, (4,),
         ([17.1, -17.1, 17.1, -17.1],
          [3.0, 3.0, -3.0, -3.0]),
         [2.1000000000000014, -2.1000000000000014, 2.1000000000000014, -2.1000000000000014], EQ),
    ),
)

# stablehlo/tests/interpret/maximum.mlir
MAXIMUM = Table(
    "maximum.mlir",
    {ANY: ("maximum",), "bool": ("logical_or",)},  # HIR refuses max of bools: it is or
    _shared("max", _MINMAX_OPERANDS, (
        [0, 1, 8, -9, 127],  # si8
        [255, 16],  # ui8
        [0, 1, 128, -129, 32767],  # si16
        [65535, 256],  # ui16
        [0, 1, 32768, -32769, 2147483647],  # si32
        [4294967295, 65536],  # ui32
        [0, 1, 2147483648, -2147483649, 9223372036854775807],  # si64
        [18446744073709551615, 4294967296],  # ui64
        [False, True, True, True],  # i1
        ["0xFF80", -1.000000e+00, -9.183550e-41, -0.000000e+00, 0.000000e+00, 9.183550e-41,
         1.000000e+00, "0x7F80", "0x7F80", "0x7F80", "0x7FC0"],  # bf16
        ["0xFC00", -1.000000e+00, -5.960460e-08, -0.000000e+00, 0.000000e+00, 5.960460e-08,
         1.000000e+00, "0x7C00", "0x7C00", "0x7C00", "0x7E00"],  # f16
        ["0xFF800000", -1.000000e+00, -1.401300e-45, -0.000000e+00, 0.000000e+00, 1.401300e-45,
         1.000000e+00, "0x7F800000", "0x7F800000", "0x7F800000", "0x7FC00000"],  # f32
        ["0xFFF0000000000000", -1.000000e+00, -4.940660e-324, -0.000000e+00, 0.000000e+00,
         4.940660e-324, 1.000000e+00, "0x7FF0000000000000", "0x7FF0000000000000",
         "0x7FF0000000000000", "0x7FF8000000000000"],  # f64
    )),
    exact=True,
)

# stablehlo/tests/interpret/minimum.mlir
MINIMUM = Table(
    "minimum.mlir",
    {ANY: ("minimum",), "bool": ("logical_and",)},  # HIR refuses min of bools: it is and
    _shared("min", _MINMAX_OPERANDS, (
        [-128, -1, 8, -9, 0],  # si8
        [0, 16],  # ui8
        [-32768, -1, 128, -129, 0],  # si16
        [0, 256],  # ui16
        [-2147483648, -1, 32768, -32769, 0],  # si32
        [0, 65536],  # ui32
        [-9223372036854775808, -1, 2147483648, -2147483649, 0],  # si64
        [0, 4294967296],  # ui64
        [False, False, False, True],  # i1
        ["0xFF80", "0xFF80", -1.000000e+00, -9.183550e-41, -0.000000e+00, 0.000000e+00,
         9.183550e-41, 1.000000e+00, "0x7F80", "0xFF80", "0x7FC0"],  # bf16
        ["0xFC00", "0xFC00", -1.000000e+00, -5.960460e-08, -0.000000e+00, 0.000000e+00,
         5.960460e-08, 1.000000e+00, "0x7C00", "0xFC00", "0x7E00"],  # f16
        ["0xFF800000", "0xFF800000", -1.000000e+00, -1.401300e-45, -0.000000e+00, 0.000000e+00,
         1.401300e-45, 1.000000e+00, "0x7F800000", "0xFF800000", "0x7FC00000"],  # f32
        ["0xFFF0000000000000", "0xFFF0000000000000", -1.000000e+00, -4.940660e-324, -0.000000e+00,
         0.000000e+00, 4.940660e-324, 1.000000e+00, "0x7FF0000000000000", "0xFFF0000000000000",
         "0x7FF8000000000000"],  # f64
    )),
    exact=True,
)

# fmt: on

TABLES = (
    SQRT,
    SIGN,
    EXPM1,
    LOG1P,
    IS_FINITE,
    ROUND_NEAREST_AFZ,
    ROUND_NEAREST_EVEN,
    NOT,
    AND,
    OR,
    XOR,
    POWER,
    SHIFT_LEFT,
    SHIFT_RIGHT_ARITHMETIC,
    SHIFT_RIGHT_LOGICAL,
    DIVIDE,
    REMAINDER,
    MAXIMUM,
    MINIMUM,
)
