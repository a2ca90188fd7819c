"""Every op the StableHLO exit lowers, over the dtypes it supports: emitted, parsed and verified
by jaxlib, serialised as a portable artifact at the pinned target, run on XLA and compared with
the reference evaluator (SFEP-0053 §3.7; DESIGN §6). Ops that fail closed are tested to raise."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tilefoundry.ir.types.dtype as dtype_module
from support.functions import call, function_of
from support.stablehlo_check import check, checked_text
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Constant, Op, ParamDef, Tuple
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.ir.hir.nn import (
    Conv2D,
    Gelu,
    LayerNorm,
    MatMul,
    ReLU,
    RMSNorm,
    RoPE,
    Sigmoid,
    Silu,
    SoftMax,
    Tanh,
)
from tilefoundry.ir.hir.shape import ShapeCompose, ShapeExtract
from tilefoundry.ir.hir.sharding import Local, Reshard
from tilefoundry.ir.hir.tensor import (
    BroadcastTo,
    CacheUpdate,
    Cast,
    Concat,
    Gather,
    InsertSlice,
    Rank,
    Reduce,
    ReduceKind,
    Reshape,
    ShapeOf,
    Slice,
    Stack,
    TopK,
    Transpose,
    TupleGetItem,
    Where,
    Zeros,
)
from tilefoundry.ir.types import (
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
from tilefoundry.ir.types.shard import Split, make_mesh
from tilefoundry.rules import STABLEHLO, TYPEINFER

pytest.importorskip("jax", reason="the StableHLO toolchain tests need jax[lib]")

from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo

SIGNED = (i8, i16, i32, i64)
UNSIGNED = (u8, u16, u32, u64)
FLOATS = (f16, bf16, f32, f64, fp8e4m3)
NUMERIC = (*SIGNED, *UNSIGNED, *FLOATS)
WIDE_FLOATS = (f32, f64, bf16, f16)


t = make_tensor_type  # the shorthand the case tables use


def data(shape, dtype: DType, seed: int = 0, nonzero: bool = False) -> np.ndarray:
    """Small values every dtype holds exactly (ints) or approximately (floats), with ties."""
    rng = np.random.default_rng(seed)
    np_dtype = np.dtype(dtype.to_numpy())
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        low = 1 if dtype.is_unsigned and nonzero else 0 if dtype.is_unsigned else -9
        values = rng.integers(low, 10, shape)
        if nonzero:
            values = np.where(values == 0, 3, values)
        return values.astype(np_dtype)
    values = np.round(rng.standard_normal(shape) * 3, 1)
    if nonzero:
        values = np.where(np.abs(values) < 0.5, 1.5, values)
    return values.astype(np_dtype)


def of(ops, *types, name="f"):
    """A Function applying each op to all parameters, returning them all (one module per test)."""
    params = {f"a{i}": type_ for i, type_ in enumerate(types)}
    ops = ops if isinstance(ops, list) else [ops]

    def build(*args):
        results = [call(op, *args) for op in ops]
        return results[0] if len(results) == 1 else Tuple(tuple(results))

    return function_of(params, build, name)


# -- math ---------------------------------------------------------------------------------------

_ARITHMETIC = (BinaryKind.ADD, BinaryKind.SUB, BinaryKind.MUL, BinaryKind.MIN, BinaryKind.MAX)
_COMPARE = (
    BinaryKind.EQ,
    BinaryKind.NE,
    BinaryKind.LT,
    BinaryKind.LE,
    BinaryKind.GT,
    BinaryKind.GE,
)


_INTEGER_ONLY = (
    BinaryKind.TRUNC_DIV,
    BinaryKind.BITWISE_AND,
    BinaryKind.BITWISE_OR,
    BinaryKind.BITWISE_XOR,
    BinaryKind.SHIFT_LEFT,
    BinaryKind.SHIFT_RIGHT_ARITHMETIC,
    BinaryKind.SHIFT_RIGHT_LOGICAL,
)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_binary_kinds_with_implicit_broadcast(dtype):
    """Integer shifts see negative amounts (out of range, as unsigned) and pow negative
    exponents and wrapping results; the float kinds see NaN-producing operands."""
    kinds = [*_ARITHMETIC, *_COMPARE, BinaryKind.FLOOR_DIV, BinaryKind.MOD, BinaryKind.POW]
    kinds.append(BinaryKind.REM)
    kinds.extend((BinaryKind.DIV,) if dtype.is_float else _INTEGER_ONLY)
    fn = of([Binary(kind=k) for k in kinds], t((2, 1, 5), dtype), t((3, 1), dtype))
    lhs, rhs = data((2, 1, 5), dtype), data((3, 1), dtype, seed=1, nonzero=True)
    text = check(fn, lhs, rhs)
    assert "stablehlo.broadcast_in_dim" in text


def test_logical_binary_and_comparisons_of_bool():
    bitwise = (BinaryKind.BITWISE_AND, BinaryKind.BITWISE_OR, BinaryKind.BITWISE_XOR)
    kinds = [BinaryKind.AND, BinaryKind.OR, *bitwise, *_COMPARE]
    fn = of([Binary(kind=k) for k in kinds], t((6,), bool_), t((6,), bool_))
    check(fn, data((6,), bool_), data((6,), bool_, seed=1))


def test_float_floor_div_and_mod_follow_numpy_signs_and_zero_division():
    fn = of([Binary(kind=BinaryKind.FLOOR_DIV), Binary(kind=BinaryKind.MOD)], t((8,)), t((8,)))
    lhs = np.array([7, -7, 7, -7, 1, -1, 0.5, 3], np.float32)
    rhs = np.array([2, 2, -2, -2, 0, 0, 0.1, 1.5], np.float32)
    check(fn, lhs, rhs)


@pytest.mark.parametrize("dtype", [bf16, f16, fp8e4m3], ids=str)
def test_float_literal_takes_the_other_operands_dtype(dtype):
    literal = Constant(np.float32(0.3), t((), f32, "umat"))
    fn = function_of({"x": t((4,), dtype)}, lambda x: call(Binary(kind=BinaryKind.MUL), literal, x))
    check(fn, data((4,), dtype))


_FLOAT_UNARY = (
    UnaryKind.RSQRT,
    UnaryKind.EXP,
    UnaryKind.LOG,
    UnaryKind.EXP2,
    UnaryKind.LOG2,
    UnaryKind.SQRT,
    UnaryKind.EXPM1,
    UnaryKind.LOG1P,
    UnaryKind.ERF,
    UnaryKind.IS_FINITE,
)
_ANY_UNARY = (
    UnaryKind.NEG,
    UnaryKind.ABS,
    UnaryKind.RELU,
    UnaryKind.SQUARE,
    UnaryKind.CEIL,
    UnaryKind.ROUND,
    UnaryKind.SIGN,
    UnaryKind.ROUND_HALF_AWAY,
)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_unary_kinds(dtype):
    kinds = [*_ANY_UNARY, *(_FLOAT_UNARY if dtype.is_float else (UnaryKind.BITWISE_NOT,))]
    fn = of([Unary(kind=k) for k in kinds], t((3, 5), dtype))
    x = data((3, 5), dtype)
    if dtype.is_float:
        # round: ties to even; round_half_away: away from zero; sign of -0.0 is -0.0
        x.flat[:5] = np.array([0.5, 1.5, 2.5, -0.5, -0.0]).astype(x.dtype)
    check(fn, x)


def test_logical_not():
    kinds = (UnaryKind.NOT, UnaryKind.BITWISE_NOT)
    check(of([Unary(kind=k) for k in kinds], t((5,), bool_)), data((5,), bool_))


# -- nn -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", WIDE_FLOATS, ids=str)
def test_activations(dtype):
    fn = of([ReLU(), Sigmoid(), Tanh(), Gelu(), Silu()], t((4, 6), dtype))
    x = data((4, 6), dtype)
    x.flat[:2] = np.array([40.0, -40.0]).astype(x.dtype)  # the overflow-free sigmoid branches
    check(fn, x)


@pytest.mark.parametrize("dtype", [i8, i32, u8], ids=str)
def test_relu_of_integers(dtype):
    check(of(ReLU(), t((7,), dtype)), data((7,), dtype))


@pytest.mark.parametrize("dtype", [f32, bf16, f64], ids=str)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(dtype, axis):
    check(of(SoftMax(axis=axis), t((3, 8), dtype)), data((3, 8), dtype))


def test_softmax_of_a_row_of_minus_inf_is_nan_as_in_the_reference():
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]], np.float32)
    check(of(SoftMax(), t((2, 2))), x)


@pytest.mark.parametrize("dtype", [f32, bf16, f64], ids=str)
def test_norms(dtype):
    shapes = ((2, 3, 16), (16,), (16,))
    layer = function_of(
        {"x": t(shapes[0], dtype), "w": t(shapes[1], dtype), "b": t(shapes[2], dtype)},
        lambda x, w, b: Tuple((call(LayerNorm(eps=1e-5), x, w, b), call(RMSNorm(eps=1e-6), x, w))),
    )
    check(layer, *(data(s, dtype, seed=i) for i, s in enumerate(shapes)))


_MATMUL_SHAPES = [
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((4, 5), (5, 3)),
    ((2, 4, 5), (5, 3)),
    ((4, 5), (2, 5, 3)),
    ((2, 1, 4, 5), (3, 5, 6)),
    ((5,), (2, 5, 3)),
    ((2, 4, 5), (5,)),
]


@pytest.mark.parametrize(("lhs", "rhs"), _MATMUL_SHAPES, ids=str)
def test_matmul_torch_shapes(lhs, rhs):
    text = check(of(MatMul(), t(lhs), t(rhs)), data(lhs, f32), data(rhs, f32, seed=1))
    assert "stablehlo.dot_general" in text and "stablehlo.dot " not in text


@pytest.mark.parametrize("dtype", [bf16, f16, f64, i32, i8, fp8e4m3], ids=str)
def test_matmul_dtypes(dtype):
    fn = of(MatMul(), t((2, 3, 8), dtype), t((2, 8, 4), dtype))
    check(fn, data((2, 3, 8), dtype), data((2, 8, 4), dtype, seed=1))


_CONVS = [
    {},
    {"stride": (2, 1), "padding": (1, 2)},
    {"dilation": (2, 2), "padding": (1, 1)},
    {"groups": 2},
]


@pytest.mark.parametrize("attrs", _CONVS, ids=str)
def test_conv2d(attrs):
    groups = attrs.get("groups", 1)
    shapes = ((2, 4, 7, 6), (6, 4 // groups, 3, 2), (6,))
    fn = of(Conv2D(**attrs), *(t(s) for s in shapes))
    check(fn, *(data(s, f32, seed=i) for i, s in enumerate(shapes)))


def test_conv2d_bf16_accumulates_in_f32():
    shapes = ((1, 2, 5, 5), (3, 2, 3, 3), (3,))
    fn = of(Conv2D(padding=(1, 1)), *(t(s, bf16) for s in shapes))
    check(fn, *(data(s, bf16, seed=i) for i, s in enumerate(shapes)))


@pytest.mark.parametrize("dtype", [f32, bf16], ids=str)
def test_rope(dtype):
    types = (t((2, 3, 5, 8), dtype), t((2, 1, 5, 8), dtype), t((9, 8), dtype), t((9, 8), dtype))
    fn = of(RoPE(), *types, t((5,), i32))
    arrays = [data(type_.shape, dtype, seed=i) for i, type_ in enumerate(types)]
    check(fn, *arrays, np.array([0, 3, 8, 3, 1], np.int32))


# -- tensor -------------------------------------------------------------------------------------

_REDUCTIONS = [
    ((1,), False),
    ((0, 2), True),
    ((-1,), True),
]


@pytest.mark.parametrize("dtype", [*NUMERIC, bool_], ids=str)
def test_reduce_kinds(dtype):
    kinds = [ReduceKind.MAX]
    if not dtype.is_bool:
        kinds += [ReduceKind.SUM, ReduceKind.ABS_MAX]
    if dtype.is_float:
        kinds.append(ReduceKind.MEAN)
    ops = [Reduce(axes=a, keepdim=k, kind=kind) for kind in kinds for a, k in _REDUCTIONS]
    x = data((3, 4, 5), dtype)
    if dtype in SIGNED:
        x.flat[0] = np.iinfo(x.dtype).min  # abs wraps; max must still see it
    check(of(ops, t((3, 4, 5), dtype)), x)


def test_empty_reduction_is_the_identity():
    ops = [Reduce(axes=(1,), kind=k) for k in (ReduceKind.SUM, ReduceKind.MAX, ReduceKind.ABS_MAX)]
    check(of(ops, t((3, 0))), np.zeros((3, 0), np.float32))


_CASTS = (f32, f16, bf16, fp8e4m3, i32, i64, bool_)


@pytest.mark.parametrize("source", [f32, bf16, i32, i64, bool_, u8], ids=str)
def test_cast(source):
    fn = of([Cast(dtype=d) for d in _CASTS], t((12,), source))
    check(fn, data((12,), source))


def test_cast_to_the_exponent_only_scale_format():
    x = np.array([0.25, 1.0, 3.0, 1000.0], np.float32)
    check(of(Cast(dtype=f8e8m0), t((4,))), x)


def test_where_broadcasts_every_operand():
    fn = of(Where(), t((3, 1), bool_), t((4,), i32), t((1, 4), i32))
    check(fn, data((3, 1), bool_), data((4,), i32), data((1, 4), i32, seed=1))


def test_views():
    ops = [
        BroadcastTo(shape=(2, 3, 4)),
        Transpose(perm=(1, 0)),
        Transpose(),
        Reshape(new_shape=(2, -1)),
        Slice(begin=(-2, None), end=(None, None), strides=(1, 2)),
        Slice(begin=(1, 3), end=(2, 4), squeeze_axes=(0, 1)),
        Slice(begin=(0,), end=(100,)),
    ]
    check(of(ops, t((3, 4), i16)), data((3, 4), i16))


def test_concat_and_stack():
    pair = (t((2, 3), bf16), t((2, 3), bf16))

    def build(a, b):
        both = Tuple((a, b))
        return Tuple(
            (
                call(Concat(axis=1), both),
                call(Concat(axis=-2), both),
                call(Stack(axis=0), both),
                call(Stack(axis=2), both),
            )
        )

    fn = function_of({"a": pair[0], "b": pair[1]}, build)
    check(fn, data((2, 3), bf16), data((2, 3), bf16, seed=1))


@pytest.mark.parametrize(
    ("x_shape", "i_shape", "axis", "batch"),
    [
        ((5, 3), (4,), 0, 0),
        ((2, 6, 3), (2, 2), 1, 0),
        ((2, 6, 3), (2, 4), 1, 1),
        ((4, 5), (), 1, 0),
    ],
    ids=str,
)
def test_gather(x_shape, i_shape, axis, batch):
    fn = of(Gather(axis=axis, batch_dims=batch), t(x_shape, f16), t(i_shape, i64))
    indices = np.random.default_rng(2).integers(0, x_shape[axis], i_shape).astype(np.int64)
    check(fn, data(x_shape, f16), indices)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_breaks_ties_by_lower_index_and_ranks_nan_highest(largest):
    x = np.array([[1, 3, 3, 0.0, -0.0, np.nan, 2, 3], [5, 4, 4, 4, 1, 1, 1, 0]], np.float32)
    fn = of(TopK(k=4, largest=largest), t((2, 8)))
    check(fn, x)


@pytest.mark.parametrize("dtype", [bf16, i32, u8], ids=str)
def test_topk_dtypes_along_a_leading_axis(dtype):
    fn = of(TopK(k=2, axis=0), t((5, 3), dtype))
    check(fn, data((5, 3), dtype))


def test_zeros_shapes_and_tuples():
    def build(x):
        shape = call(ShapeOf(), x)
        extent = call(ShapeExtract(index=-1), shape)
        composed = call(ShapeCompose(), Tuple((extent, call(Rank(), x))))
        pair = Tuple((x, call(Zeros(shape=(2, 3), dtype=u16))))
        scalar_shape = call(ShapeCompose(), Tuple(()))  # a rank-0 value's shape: empty
        return Tuple((shape, extent, composed, scalar_shape, call(TupleGetItem(index=1), pair)))

    check(function_of({"x": t((4, 7))}, build), data((4, 7), f32))


def test_insert_slice_at_runtime_offsets():
    fn = function_of(
        {"dst": t((5, 6)), "update": t((2, 3)), "row": t((), i32), "col": t((), i64)},
        lambda dst, update, row, col: call(InsertSlice(), dst, update, Tuple((row, col))),
    )
    check(fn, data((5, 6), f32), data((2, 3), f32, seed=1), np.int32(3), np.int64(2))


def test_insert_slice_with_a_bare_offset():
    fn = of(InsertSlice(), t((6,), u32), t((2,), u32), t((), i32))
    check(fn, data((6,), u32), data((2,), u32, seed=1), np.int32(4))


@pytest.mark.parametrize(("cur_pos", "s"), [(0, 3), (2, 1), (5, 2)])
def test_cache_update_writes_s_positions_at_cur_pos(cur_pos, s):
    cache, new = (2, 7, 2, 4), (2, 3, 2, 4)
    fn = of(CacheUpdate(), t(cache, bf16), t((), i32), t((1,), i32), t(new, bf16))
    check(fn, data(cache, bf16), np.int32(cur_pos), np.array([s], np.int32), data(new, bf16, 1))


def test_unsharded_reshard_is_the_identity():
    fn = of(Reshard(), t((3, 4)))
    text = check(fn, data((3, 4), f32))
    assert "return %arg0 :" in text


def test_exotic_float_values_pass_through_and_compare():
    x = np.array([0.5, 1.0, 2.0, 4.0], np.float32)
    ops = [Binary(kind=BinaryKind.MAX), Binary(kind=BinaryKind.LT)]
    check(
        of(ops, t((4,), f8e8m0), t((4,), f8e8m0)),
        *(v.astype(ml_dtypes.float8_e8m0fnu) for v in (x, x[::-1])),
    )


def test_fp4_runs_on_xla_although_the_reference_cannot_evaluate_it():
    """The evaluator has no f4e2m1 kernels, so the oracle here is ml_dtypes directly."""
    fp4 = np.dtype(ml_dtypes.float4_e2m1fn)
    x = np.array([0.5, 1.0, -2.0, 6.0]).astype(fp4)
    y = np.array([1.5, 1.0, 3.0, -4.0]).astype(fp4)
    ops = [Binary(kind=BinaryKind.ADD), Binary(kind=BinaryKind.LT)]
    fn = of(ops, t((4,), f4e2m1), t((4,), f4e2m1))
    checked_text(fn, x, y)
    total, less = run_xla(fn, x, y)
    np.testing.assert_array_equal(total, (x.astype(np.float32) + y.astype(np.float32)).astype(fp4))
    np.testing.assert_array_equal(less, x < y)


# -- fail closed --------------------------------------------------------------------------------

_MESH = make_mesh((2,), ("x",))
_SHARDED = make_shard_tensor_type((8,), f32, mesh=_MESH, attrs=(Split(0),))


def test_sharded_programs_go_to_the_spmd_exit():
    """DESIGN §3: one emitter; a program on a device mesh gets the SPMD module, where a Local
    result (no global value) is refused and a Reshard is its plan's collectives (none here)."""
    local = function_of({"x": _SHARDED}, lambda x: call(Local(), x))
    with pytest.raises(UnsupportedError, match=r"per-device \(Local\) value"):
        emit_stablehlo(local)
    text = emit_stablehlo(function_of({"x": _SHARDED}, lambda x: call(Reshard(), x)))
    assert "sdy.manual_computation" in text and "all_" not in text


def test_rules_refuse_sharding_even_when_asked_directly():
    with pytest.raises(UnsupportedError, match=r"Local: .* the single-device StableHLO exit"):
        STABLEHLO.lookup(Local)(Local(), ("%a",), (_SHARDED,), _SHARDED, None)
    with pytest.raises(UnsupportedError, match="Reshard: the operand is sharded"):
        STABLEHLO.lookup(Reshard)(Reshard(), ("%a",), (_SHARDED,), t((8,)), None)


class _Unlowered(Op):
    """An op with a typeinfer rule but no lowering."""

    x = ParamDef("input")


TYPEINFER.register(_Unlowered)(lambda op, arg_types, ctx: arg_types[0])


def test_an_op_without_a_rule_fails_closed():
    fn = of(_Unlowered(), t((4,)))
    with pytest.raises(UnsupportedError, match="_Unlowered: no stablehlo rule"):
        emit_stablehlo(fn)


def test_a_dtype_without_a_stablehlo_type_fails_closed(monkeypatch):
    # a private dtype table for this test, so the probe dtype never leaks into DType.from_name
    monkeypatch.setattr(dtype_module, "_BY_NAME", dict(dtype_module._BY_NAME))
    fp6 = DType._define("fp6e3m2_probe", 6, "float", 3, 2)
    fn = of(ReLU(), t((4,), fp6))
    with pytest.raises(UnsupportedError, match="fp6e3m2_probe has no StableHLO type"):
        emit_stablehlo(fn)


_FAILS_CLOSED = ("tilefoundry.ir.hir.sharding.local.Local",)
"""Ops this exit refuses by design (each raises UnsupportedError from its own rule)."""


def test_every_catalog_op_has_a_stablehlo_rule():
    def qualified(cls):
        return f"{cls.__module__}.{cls.__qualname__}"

    catalog = {
        qualified(c)
        for c in TYPEINFER.registered()
        if isinstance(c, type) and issubclass(c, Op) and c.__module__.startswith("tilefoundry.")
    }
    lowered = {qualified(c) for c in STABLEHLO.registered()}
    assert catalog - lowered == set()
    assert sorted(_FAILS_CLOSED) == list(_FAILS_CLOSED)
    assert set(_FAILS_CLOSED) <= lowered
