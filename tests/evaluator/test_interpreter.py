"""evaluate(): inputs, DimVar binding, dispatch, loops, tuples, sharing, calls, layouts, dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from support.functions import call, function_of
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call, DimVarRangePat, Op, ParamDef, Tuple, Var
from tilefoundry.ir.hir import Function, make_grid_region
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.tensor.cast import Cast
from tilefoundry.ir.types import DimVar, bf16, f4e2m1, f32, fp8e4m3, i32, make_tensor_type
from tilefoundry.ir.types.shard import Layout
from tilefoundry.rules import register_eval, register_typeinfer

ADD = Binary(kind=BinaryKind.ADD)
MUL = Binary(kind=BinaryKind.MUL)
S = DimVar("S", 0, 64)


class CountedNeg(Op):
    """Negation whose kernel counts its calls, to observe memoisation."""

    x = ParamDef("input")
    calls = [0]  # noqa: RUF012 - a shared counter is the point


@register_typeinfer(CountedNeg)
def _counted_type(op, arg_types, ctx):
    return arg_types[0]


@register_eval(CountedNeg)
def _counted_eval(op, args, out_type):
    CountedNeg.calls[0] += 1
    return -args[0]


def t(shape, dtype=f32, layout=None):
    return make_tensor_type(shape, dtype, layout=layout)


def rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def add_fn(shape=(2, 3)):
    return function_of({"a": t(shape), "b": t(shape)}, lambda a, b: call(ADD, a, b))


# -- inputs -------------------------------------------------------------------------------------


def test_wrong_argument_count_names_the_parameters():
    with pytest.raises(EvalError, match=r"expected 2 argument\(s\) \(a, b\), got 1"):
        evaluate(add_fn(), rand(2, 3))


def test_wrong_extent_names_parameter_and_axis():
    with pytest.raises(EvalError, match=r"parameter 'b' axis 1 has extent 3, got 4"):
        evaluate(add_fn(), rand(2, 3), rand(2, 4))


def test_wrong_rank_names_parameter():
    with pytest.raises(EvalError, match=r"parameter 'a' has rank 2"):
        evaluate(add_fn(), rand(6), rand(2, 3))


def test_wrong_dtype_names_parameter():
    with pytest.raises(EvalError, match=r"parameter 'b' is f32 .* dtype float64"):
        evaluate(add_fn(), rand(2, 3), rand(2, 3, dtype=np.float64))


def test_unsupported_parameter_dtype_fails_closed():
    f = function_of({"a": t((2,), f4e2m1)}, lambda a: a)
    with pytest.raises(UnsupportedError, match="f4e2m1 is not supported"):
        evaluate(f, np.zeros(2, dtype=ml_dtypes.float4_e2m1fn))


# -- DimVar binding and dispatch -----------------------------------------------------------------


def test_dimvar_binds_from_shapes():
    f = function_of({"a": t((S, 3)), "b": t((S, 3))}, lambda a, b: call(ADD, a, b))
    a, b = rand(5, 3), rand(5, 3, seed=1)
    np.testing.assert_allclose(evaluate(f, a, b), a + b)


def test_dimvar_conflict_is_an_eval_error():
    f = function_of({"a": t((S, 3)), "b": t((S, 3))}, lambda a, b: call(ADD, a, b))
    with pytest.raises(EvalError, match=r"DimVar S is bound to 5 .* but to 4"):
        evaluate(f, rand(5, 3), rand(4, 3))


# hir §1.1 Envelope coverage: a DimVar(name, lo, hi) envelope is half-open [lo, hi)
def test_dimvar_outside_envelope_is_an_eval_error():
    f = function_of({"a": t((S,))}, lambda a: a)
    with pytest.raises(EvalError, match=r"S=70 lies outside its envelope \[0, 64\)"):
        evaluate(f, rand(70))


def test_dimvar_only_inside_an_expression_is_unbound():
    f = function_of({"a": t((S + 1,))}, lambda a: a)
    with pytest.raises(EvalError, match="no parameter axis binds on its own"):
        evaluate(f, rand(4))


def _dispatch_base():
    n = DimVar("N", 1, 32)
    x = Var("x", t((n,)))
    base = Function("g", (x,), None, t((n,)))
    base.specialize(DimVarRangePat("N", 1, 8), call(ADD, x, x))
    base.specialize(DimVarRangePat("N", 8, 32), call(MUL, x, x))
    base.seal()
    return base


# hir §1.1 Dispatch resolution: the variant whose DimVarRangePat matches the concrete shapes
def test_dispatch_selects_the_matching_variant():
    base = _dispatch_base()
    small, large = rand(4), rand(9)
    np.testing.assert_allclose(evaluate(base, small), small + small)
    np.testing.assert_allclose(evaluate(base, large), large * large)


# hir §1.1 Dispatch resolution: a shape outside the envelope matches no variant and is an error
def test_dispatch_outside_every_variant_is_an_eval_error():
    with pytest.raises(EvalError, match="outside its envelope"):
        evaluate(_dispatch_base(), rand(40))


# -- loops ----------------------------------------------------------------------------------------


def _loop_fn(extent, *, step=1, start=0, carries=1):
    def build(a):
        inits = (a,) * carries
        return make_grid_region(
            inits,
            extent,
            lambda i, phis: (phis[0], tuple(call(ADD, p, a) for p in phis)),
            step=step,
            start=start,
        )

    return function_of({"a": t((S,))}, build)


# hir §1.2: a ShapeDim start/extent/step is resolved by the evaluator against the argument shapes
def test_loop_accumulates_with_symbolic_extent():
    a = rand(4)
    np.testing.assert_allclose(evaluate(_loop_fn(S, step=2), a), a * 3)


# hir §1.2: "An unbound DimVar MUST raise."
def test_loop_with_unbound_extent_dimvar_is_an_eval_error():
    k = DimVar("K", 0, 8)
    f = function_of(
        {"a": t((S + k,))},
        lambda a: make_grid_region((a,), k, lambda i, phis: (phis[0], (call(ADD, phis[0], a),))),
    )
    with pytest.raises(EvalError, match=r"extent K\+S, which no parameter axis binds on its own"):
        evaluate(f, rand(4))


# hir §1.2: the resolved start and extent MUST be non-negative integers
def test_loop_with_negative_extent_is_an_eval_error():
    with pytest.raises(EvalError, match=r"non-negative.*extent=-6"):
        evaluate(_loop_fn(S - 10), rand(4))


# hir §1.2: the resolved step MUST be a positive integer; otherwise resolution MUST raise
def test_loop_with_zero_step_is_an_eval_error():
    with pytest.raises(EvalError, match="step must be positive, got 0"):
        evaluate(_loop_fn(S, step=S - 4), rand(4))


# hir §1.2 Carry-out: the first-iteration value of each phi is its init; no iteration keeps it
def test_empty_loop_domain_returns_the_init_values():
    a = rand(3)
    np.testing.assert_array_equal(evaluate(_loop_fn(S, start=5), a), a)


def test_multi_carry_loop_returns_a_tuple():
    a = rand(3)
    first, second = evaluate(_loop_fn(2, carries=2), a)
    np.testing.assert_allclose(first, a * 3)
    np.testing.assert_allclose(second, a * 3)


def test_no_carry_loop_is_an_empty_tuple():
    f = function_of(
        {"a": t((S,))},
        lambda a: Tuple((a, make_grid_region((), 3, lambda i, phis: (a, ())))),
    )
    a = rand(2)
    value, empty = evaluate(f, a)
    np.testing.assert_array_equal(value, a)
    assert empty == ()


def test_loop_invariant_node_is_computed_once():
    def build(a):
        invariant = call(CountedNeg(), a)
        return make_grid_region(
            (a,), 4, lambda i, phis: (phis[0], (call(ADD, phis[0], invariant),))
        )

    f = function_of({"a": t((3,))}, build)
    CountedNeg.calls[0] = 0
    a = rand(3)
    np.testing.assert_allclose(evaluate(f, a), a - 4 * a, rtol=1e-6)
    assert CountedNeg.calls[0] == 1


# -- tuples, sharing, calls -----------------------------------------------------------------------


def test_tuple_result():
    f = function_of(
        {"a": t((2,)), "b": t((2,))}, lambda a, b: Tuple((call(ADD, a, b), call(MUL, a, b)))
    )
    a, b = rand(2), rand(2, seed=1)
    total, product = evaluate(f, a, b)
    np.testing.assert_allclose(total, a + b)
    np.testing.assert_allclose(product, a * b)


def test_shared_subdag_is_evaluated_once():
    def build(a):
        shared = call(CountedNeg(), a)
        return call(ADD, call(MUL, shared, shared), shared)

    f = function_of({"a": t((3,))}, build)
    CountedNeg.calls[0] = 0
    a = rand(3)
    np.testing.assert_allclose(evaluate(f, a), a * a - a, rtol=1e-6)
    assert CountedNeg.calls[0] == 1


def test_function_call_evaluates_the_callee_with_the_arguments():
    square = function_of({"x": t((S,))}, lambda x: call(MUL, x, x), name="square")
    f = function_of(
        {"a": t((S,)), "b": t((S,))},
        lambda a, b: call(ADD, Call(square, (a,)), Call(square, (b,))),
    )
    a, b = rand(5), rand(5, seed=1)
    np.testing.assert_allclose(evaluate(f, a, b), a * a + b * b, rtol=1e-6)


# hir §1.1: a Call whose target is a dispatch prototype selects the matching variant
def test_call_of_a_dispatch_base_selects_per_call():
    base = _dispatch_base()
    n = DimVar("N", 1, 32)
    f = function_of({"a": t((n,))}, lambda a: Call(base, (a,)))
    a = rand(12)
    np.testing.assert_allclose(evaluate(f, a), a * a)


# -- layouts and dtypes ---------------------------------------------------------------------------


# SFEP-0053 §3.7: the scalar oracle honours the physical layout when it computes addresses
def test_column_major_parameter_equals_row_major():
    col = Layout((3, 4), (1, 3))
    row = function_of({"a": t((3, 4)), "b": t((4, 2))}, lambda a, b: call(MatMul(), a, b))
    col_fn = function_of(
        {"a": t((3, 4), layout=col), "b": t((4, 2))}, lambda a, b: call(MatMul(), a, b)
    )
    a, b = rand(3, 4), rand(4, 2, seed=1)
    np.testing.assert_allclose(evaluate(col_fn, a, b), evaluate(row, a, b), rtol=1e-6)
    np.testing.assert_allclose(evaluate(col_fn, a, b), a @ b, rtol=1e-5)


def test_padded_result_layout_reads_back_the_logical_value():
    padded = Layout((2, 3), (8, 2))
    f = function_of({"a": t((2, 3), layout=padded)}, lambda a: call(Unary(kind=UnaryKind.NEG), a))
    a = rand(2, 3)
    np.testing.assert_array_equal(evaluate(f, a), -a)


def test_bf16_arithmetic_rounds_like_f32_then_bf16():
    f = function_of({"a": t((4,), bf16), "b": t((4,), bf16)}, lambda a, b: call(ADD, a, b))
    a, b = rand(4, dtype=ml_dtypes.bfloat16), rand(4, dtype=ml_dtypes.bfloat16, seed=1)
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(ml_dtypes.bfloat16)
    result = evaluate(f, a, b)
    assert result.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result.astype(np.float32), expected.astype(np.float32))


def test_cast_to_fp8_is_supported():
    f = function_of({"a": t((4,))}, lambda a: call(Cast(dtype=fp8e4m3), a))
    a = np.array([0.5, -1.0, 2.0, 448.0], dtype=np.float32)
    result = evaluate(f, a)
    assert result.dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(result.astype(np.float32), a)


# hir §1.3 Cast: evaluating a Cast to a dtype outside the evaluator's set (e.g. f4e2m1) raises
def test_cast_to_f4e2m1_fails_closed():
    f = function_of({"a": t((4,), i32)}, lambda a: call(Cast(dtype=f4e2m1), a))
    with pytest.raises(UnsupportedError, match="Cast: dtype f4e2m1 is not supported"):
        evaluate(f, np.arange(4, dtype=np.int32))
