"""The reference kernels made cheaper keep their values: bit for bit the formulas they replaced
(written out here in plain numpy), within f32 rounding of a float64 reference, and the EVAL_INTO
rules write exactly what the EVAL rules return.

DESIGN §1: the reference evaluator is "the CPU oracle"; the evaluator speed goal (issue 19) is
to be met "without weakening the oracle's numerics".
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.ir.hir.nn.activations import Sigmoid, Silu
from tilefoundry.ir.hir.nn.norms import LayerNorm, RMSNorm
from tilefoundry.ir.hir.nn.softmax import SoftMax
from tilefoundry.ir.types import bf16, f32, f64, make_tensor_type
from tilefoundry.rules import EVAL, EVAL_INTO

EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.7, -88.7, 100.0, -100.0, -104.0]
EDGES += [-110.0, 3e38, -3e38, 1.0, -1.0, 20.0, -20.0]


def _samples(dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(7)
    wide = rng.standard_normal(3990) * 30.0
    return np.concatenate([wide, EDGES]).astype(dtype).reshape(-1, 19)


def _eval(op, *args, dtype=f32):
    out_type = make_tensor_type(args[0].shape, dtype)
    return EVAL.lookup(type(op))(op, args, out_type)


def _bits_equal(ours: np.ndarray, expected: np.ndarray) -> None:
    assert ours.dtype == expected.dtype and ours.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    keep = ~np.isnan(expected)
    np.testing.assert_array_equal(ours[keep].view(np.uint8), expected[keep].view(np.uint8))


def _two_branch_sigmoid(x: np.ndarray) -> np.ndarray:
    """The overflow-free logistic as first written: exp of a non-positive number only."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_and_silu_are_the_two_branch_formula_bit_for_bit(dtype):
    """hir §1.3 Silu: x * sigmoid(x) with the sigmoid never rounded; the kernel's logistic is
    the overflow-free two-branch one, values unchanged by the cheaper evaluation order."""
    x = _samples(dtype)
    ir_dtype = f32 if dtype == np.float32 else f64
    with np.errstate(all="ignore"):
        sigmoid = _two_branch_sigmoid(x)
        _bits_equal(_eval(Sigmoid(), x, dtype=ir_dtype), sigmoid)
        _bits_equal(_eval(Silu(), x, dtype=ir_dtype), x * sigmoid)


def test_sigmoid_matches_a_float64_reference_where_the_naive_formula_underflows():
    """The f32 kernel is within a few f32 roundings of the float64 logistic everywhere,
    including x < -88, where 1 / (1 + exp(-x)) in f32 gives 0 (exp overflows) but the true value
    is a subnormal the kernel still produces."""
    x = _samples()
    finite = np.isfinite(x)
    x64 = x[finite].astype(np.float64)
    reference = np.exp(-np.logaddexp(0.0, -x64))  # sigmoid in float64, no overflow
    with np.errstate(all="ignore"):
        ours = _eval(Sigmoid(), x)[finite].astype(np.float64)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    assert np.all(np.abs(ours - reference) <= 4 * 2.0**-24 * reference + 4 * tiny)
    assert ours[x[finite] == -100.0].min() > 0.0


def _naive_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_is_max_subtract_exp_sum_divide_bit_for_bit(axis):
    """hir §1.3 SoftMax: exp(x - max) / sum(exp(x - max)) along the axis; large logits do not
    overflow (the row max is subtracted first) and the result stays within f32 rounding of a
    float64 reference."""
    x = np.random.default_rng(3).standard_normal((16, 24)).astype(np.float32) * 40.0
    x[0, :3] = 1e4
    ours = _eval(SoftMax(axis=axis), x)
    _bits_equal(ours, _naive_softmax(x, axis))
    reference = _naive_softmax(x.astype(np.float64), axis)
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-44)
    assert np.all(np.isfinite(ours))


def test_softmax_of_a_row_of_only_minus_infinity_is_nan():
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]], np.float32)
    ours = _eval(SoftMax(axis=-1), x)
    assert np.isnan(ours[0]).all() and np.isfinite(ours[1]).all()


def test_rms_norm_and_layer_norm_are_their_formulas_bit_for_bit():
    """hir §1.3 norms over the last axis: x / sqrt(mean(x^2) + eps) * w, and
    (x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b (biased variance)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 48)).astype(np.float32) * 3.0
    w = (1.0 + 0.1 * rng.standard_normal(48)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    eps = 1e-5
    rms = x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) / 48 + eps) * w
    _bits_equal(_eval(RMSNorm(eps=eps), x, w), rms)
    centred = x - np.sum(x, axis=-1, keepdims=True) / 48
    layer = centred / np.sqrt(np.sum(centred * centred, axis=-1, keepdims=True) / 48 + eps) * w + b
    _bits_equal(_eval(LayerNorm(eps=eps), x, w, b), layer)
    x64 = x.astype(np.float64)
    rms64 = x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * w
    np.testing.assert_allclose(_eval(RMSNorm(eps=eps), x, w), rms64, rtol=1e-5, atol=1e-6)


ARITHMETIC = [
    BinaryKind.ADD,
    BinaryKind.SUB,
    BinaryKind.MUL,
    BinaryKind.DIV,
    BinaryKind.FLOOR_DIV,
    BinaryKind.MOD,
    BinaryKind.MIN,
    BinaryKind.MAX,
]


def _into(op, args, out):
    out_type = make_tensor_type(out.shape, f32 if out.dtype == np.float32 else f64)
    return EVAL_INTO.lookup(type(op))(op, args, out_type, out)


@pytest.mark.parametrize("kind", ARITHMETIC, ids=lambda k: k.value)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_into_its_own_operand_writes_what_eval_returns(kind, dtype):
    """EVAL_INTO contract (rules): the values written are the EVAL rule's, bit for
    bit, with `out` one of the operands; a rank-0 f32 literal and a broadcast operand too."""
    rng = np.random.default_rng(11)
    lhs = (rng.standard_normal((8, 12)) * 5).astype(dtype)
    rhs = (rng.standard_normal((8, 12)) * 5).astype(dtype)
    ir_dtype = f32 if dtype == np.float32 else f64
    for args, donor in [((lhs, rhs), 0), ((lhs, rhs), 1), ((lhs, np.float32(0.125)), 0)]:
        args = tuple(a.copy() for a in args)
        with np.errstate(all="ignore"):
            expected = _eval(Binary(kind=kind), *args, dtype=ir_dtype)
        out = args[donor]
        result = _into(Binary(kind=kind), args, out)
        assert result is out
        _bits_equal(result, expected)
    row = rhs[:1].copy()
    with np.errstate(all="ignore"):
        expected = _eval(Binary(kind=kind), lhs, row, dtype=ir_dtype)
    out = lhs.copy()
    _bits_equal(_into(Binary(kind=kind), (out, row), out), expected)


UFUNC_KINDS = [
    UnaryKind.NEG,
    UnaryKind.ABS,
    UnaryKind.SQUARE,
    UnaryKind.EXP,
    UnaryKind.LOG,
    UnaryKind.CEIL,
    UnaryKind.ROUND,
    UnaryKind.EXP2,
    UnaryKind.LOG2,
]


@pytest.mark.parametrize("kind", UFUNC_KINDS, ids=lambda k: k.value)
def test_unary_into_its_operand_writes_what_eval_returns(kind):
    x = _samples()
    with np.errstate(all="ignore"):
        expected = _eval(Unary(kind=kind), x)
        out = x.copy()
        result = _into(Unary(kind=kind), (out,), out)
    assert result is out
    _bits_equal(result, expected)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_into_its_operand_writes_what_eval_returns(axis):
    x = np.random.default_rng(2).standard_normal((10, 14)).astype(np.float32) * 20
    expected = _eval(SoftMax(axis=axis), x)
    out = x.copy()
    result = _into(SoftMax(axis=axis), (out,), out)
    assert result is out
    _bits_equal(result, expected)


def test_into_rules_decline_what_they_cannot_write_exactly():
    """A narrow float is computed in f32 and rounded once, a comparison changes the dtype, a
    non-ufunc unary kind has its own kernel: the rules return None and write nothing."""
    narrow = np.ones((4, 4), ml_dtypes.bfloat16)
    out_type = make_tensor_type((4, 4), bf16)
    before = narrow.copy()
    assert (
        EVAL_INTO.lookup(Binary)(Binary(kind=BinaryKind.ADD), (narrow, narrow), out_type, narrow)
        is None
    )
    assert EVAL_INTO.lookup(SoftMax)(SoftMax(), (narrow,), out_type, narrow) is None
    np.testing.assert_array_equal(narrow, before)
    x = np.ones((4, 4), np.float32)
    assert _into(Binary(kind=BinaryKind.LT), (x, x), x) is None
    assert _into(Unary(kind=UnaryKind.RSQRT), (x,), x) is None
    np.testing.assert_array_equal(x, np.ones((4, 4), np.float32))
