"""FusionRegion through every engine (printer, evaluator, StableHLO), and the pass manager's
contract: a pass that breaks the IR is an InternalCompilerError carrying the printed IR."""

from __future__ import annotations

import numpy as np
import pytest

from passes.builders import T8, binary, function, region_call, typed, unary
from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import InternalCompilerError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.frontend import parse_source
from tilefoundry.inspect import format_ir
from tilefoundry.ir.core import Call, SourceSpan, Var
from tilefoundry.ir.hir.math import Binary, BinaryKind
from tilefoundry.ir.hir.tensor import TupleGetItem
from tilefoundry.ir.types import TensorType, TupleType, f64
from tilefoundry.passes import Pass, PassManager, compile, verify


def two_output_program():
    x, y = Var("x", T8), Var("y", T8)

    def build(a, b):
        total = binary("add", a, b)
        scaled = binary("mul", total, a)
        negated = unary("neg", scaled)
        return [total, scaled, negated], [total, negated]

    call, body = region_call(build, (x, y))
    return function("two", (x, y), call), body


def test_region_call_has_the_tuple_type_of_several_outputs():
    fn, _ = two_output_program()
    assert fn.body.type == TupleType((T8, T8))
    assert typeinfer_call(fn.body.target, T8, T8) == TupleType((T8, T8))


def test_region_prints_as_a_nested_block(golden):
    fn, _ = two_output_program()
    golden("passes/region_two_outputs.txt", format_ir(fn))


def test_region_evaluates_its_body_with_inputs_bound():
    fn, _ = two_output_program()
    x, y = np.arange(8, dtype=np.float32), np.ones(8, dtype=np.float32)
    total, negated = evaluate(fn, x, y)
    np.testing.assert_array_equal(total, x + y)
    np.testing.assert_array_equal(negated, -((x + y) * x))


def test_region_is_emitted_inline_in_stablehlo():
    fn, _ = two_output_program()
    text = emit_stablehlo(fn)
    assert "func.call" not in text and "stablehlo.add %arg0, %arg1" in text


def test_region_arguments_must_match_inputs():
    fn, _ = two_output_program()
    with pytest.raises(VerifyError, match="argument 1 does not match input"):
        typeinfer_call(fn.body.target, T8, TensorType((8,), f64))


def _break_types(fn):
    """A deliberately wrong pass: it re-stamps the result with a type the rule does not give."""
    call = Call(Binary(kind=BinaryKind.ADD), fn.body.args, metadata=fn.body.metadata)
    call.stamp_type(TensorType((8,), f64))
    return function(fn.name, fn.params, call, fn.return_type)


def test_a_pass_that_breaks_the_ir_is_an_internal_compiler_error():
    x = Var("x", T8)
    span = SourceSpan("prog.py", 3, 9)
    body = Call(Binary(kind=BinaryKind.ADD), (x, x), metadata=(span,))
    fn = function("f", (x,), typed(body))
    manager = PassManager([Pass("break", _break_types, "hir")])
    with pytest.raises(InternalCompilerError) as info:
        manager.run(fn)
    text = str(info.value)
    assert "pass 'break' broke the IR" in text and "does not follow its rule" in text
    assert ">>   %0 = add(%x, %x) : f64[8]  loc(prog.py:3:9)" in text


def test_user_errors_stay_verify_errors_and_debug_prints_the_ir(capsys):
    x = Var("x", T8)
    fn = function("f", (x,), binary("add", x, Var("z", T8)))
    with pytest.raises(VerifyError, match="foreign Var"):
        PassManager([], debug=True).run(fn)
    assert "func @f" in capsys.readouterr().err


def test_verify_walks_into_called_regions_and_tuple_get_item():
    """The verifier checks a region's body through its call and a TupleGetItem of it: the valid
    program verifies, and one broken op inside the region body is found there."""
    fn, _ = two_output_program()
    first = Call(TupleGetItem(index=0), (fn.body,))
    typed(first)
    good = function("g", fn.params, first)
    assert verify(good) is good

    def broken(a, b):
        total = binary("add", a, b)
        scaled = Call(Binary(kind=BinaryKind.MUL), (total, a))
        scaled.stamp_type(TensorType((8,), f64))  # a type its rule does not give
        return [total, scaled], [total, scaled]

    x, y = Var("x", T8), Var("y", T8)
    call, _ = region_call(broken, (x, y))
    item = typed(Call(TupleGetItem(index=1), (call,)))
    with pytest.raises(VerifyError, match=r"Binary: declared type f64\[8\].*follow its rule"):
        verify(function("g", (x, y), item))


def test_a_region_whose_input_is_a_call_result_fuses():
    """Issue 20: `tf.neg(callee(x)) + y` raised a bare KeyError in fuse (rebuilding the callee
    in the middle of the caller replaced the caller's node map). A call is a fusion barrier
    (SFEP §3.5): the region's input is the call's result."""
    program = parse_source(
        "from tilefoundry import func, Tensor\n"
        "from tilefoundry.dsl import tf\n\n"
        "@func\n"
        'def callee(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:\n'
        "    return x * x\n\n"
        "@func\n"
        'def f(x: Tensor[(4,), "f32"], y: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:\n'
        "    return tf.neg(callee(x)) + y\n",
        "fuse_call.py",
    )
    fused, report = compile(program["f"])
    x, y = np.arange(4, dtype=np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(evaluate(fused, x, y), -(x * x) + y)
    assert "1 fusion region(s)" in str(report)
