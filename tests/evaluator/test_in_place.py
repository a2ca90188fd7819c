"""The evaluator writes an elementwise result over an intermediate read for the last time
(evaluator/op_calls.py, the EVAL_INTO registry), and never over anything still visible: an
input, a value read again later, a view of it, a value in the result. Every check compares with
independent numpy on the same f32 inputs.

DESIGN §3 `evaluate`: results are the caller's own arrays and the caller's inputs are never
changed; issue 19: the oracle's numerics stay what they are.
"""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.errors import EvalError
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.hir.math.binary import Binary
from tilefoundry.ir.hir.math.unary import Unary
from tilefoundry.ir.hir.nn.softmax import SoftMax
from tilefoundry.rules import EVAL_INTO

SOURCE = """
from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func


@func
def chain(x: Tensor[(6, 5), "f32"], y: Tensor[(6, 5), "f32"]):
    return tf.exp(x * y + y) - x


@func
def read_twice(x: Tensor[(6, 5), "f32"], y: Tensor[(6, 5), "f32"]):
    a = x * y
    b = tf.exp(a)
    return b + a


@func
def viewed(x: Tensor[(6, 5), "f32"], y: Tensor[(6, 5), "f32"]):
    t = x * y
    v = tf.transpose(t, (1, 0))
    w = t + 1.0
    return w * tf.transpose(v, (1, 0))


@func
def in_result(x: Tensor[(6, 5), "f32"], y: Tensor[(6, 5), "f32"]):
    a = x * y
    return a + 1.0, a


@func
def on_inputs(x: Tensor[(6, 5), "f32"], y: Tensor[(6, 5), "f32"]):
    return tf.exp(x) + y


@func
def attention(q: Tensor[(2, 4, 3), "f32"], k: Tensor[(2, 4, 3), "f32"]):
    return tf.softmax(q @ tf.transpose(k, (0, 2, 1)) * 0.5, axis=-1)
"""


@pytest.fixture
def functions():
    """Parsed afresh per test: call sites are kept per Function, each with the rules it found."""
    return parse_source(SOURCE, "<in_place>")


@pytest.fixture
def inputs():
    rng = np.random.default_rng(4)
    return [rng.standard_normal((6, 5)).astype(np.float32) for _ in range(2)]


@pytest.fixture
def writes(monkeypatch):
    """Each EVAL_INTO rule wrapped to record (op class, whether `out` was one of its operands)."""
    seen: list[tuple[type, bool]] = []
    for cls in (Binary, Unary, SoftMax):
        rule = EVAL_INTO.lookup(cls)

        def spy(op, args, out_type, out, rule=rule):
            result = rule(op, args, out_type, out)
            seen.append((type(op), any(a is out for a in args)))
            return result

        monkeypatch.setitem(EVAL_INTO._rules, cls, spy)
    return seen


def _run(functions, name, *arrays):
    """evaluate, checking the caller's arrays are unchanged afterwards."""
    copies = [a.copy() for a in arrays]
    result = evaluate(functions[name], *arrays)
    for array, copy in zip(arrays, copies, strict=True):
        np.testing.assert_array_equal(array, copy)
    return result


def test_an_elementwise_chain_runs_in_one_buffer_with_numpys_values(functions, inputs, writes):
    x, y = inputs
    np.testing.assert_array_equal(_run(functions, "chain", x, y), np.exp(x * y + y) - x)
    assert writes == [(Binary, True), (Unary, True), (Binary, True)]


def test_a_value_read_again_later_is_not_overwritten(functions, inputs, writes):
    x, y = inputs
    a = x * y
    np.testing.assert_array_equal(_run(functions, "read_twice", x, y), np.exp(a) + a)


def test_a_value_with_a_live_view_is_not_overwritten(functions, inputs, writes):
    """The walk reads `t` for the last time in `t + 1.0`, after taking its transposed view,
    which is still to be read: writing over `t` would change the view."""
    x, y = inputs
    t = x * y
    np.testing.assert_array_equal(_run(functions, "viewed", x, y), (t + 1.0) * t)
    assert writes == [(Binary, True)]  # the final product only, over `t + 1.0`


def test_a_value_in_the_result_is_not_overwritten(functions, inputs, writes):
    x, y = inputs
    first, second = _run(functions, "in_result", x, y)
    np.testing.assert_array_equal(first, x * y + 1.0)
    np.testing.assert_array_equal(second, x * y)
    assert first is not second


def test_inputs_are_never_written(functions, inputs, writes):
    x, y = inputs
    np.testing.assert_array_equal(_run(functions, "on_inputs", x, y), np.exp(x) + y)
    assert writes == [(Binary, True)]  # only exp(x), the evaluator's own array, is written over


def test_softmax_writes_over_its_dying_logits(functions, writes):
    rng = np.random.default_rng(9)
    q, k = (rng.standard_normal((2, 4, 3)).astype(np.float32) for _ in range(2))
    logits = q @ np.transpose(k, (0, 2, 1)) * np.float32(0.5)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected = e / e.sum(axis=-1, keepdims=True)
    np.testing.assert_array_equal(_run(functions, "attention", q, k), expected)
    assert writes == [(Binary, True), (SoftMax, True)]


def test_repeated_evaluations_agree(functions, inputs):
    """The call sites and read counts kept between calls do not carry values across them."""
    x, y = inputs
    first = evaluate(functions["chain"], x, y)
    second = evaluate(functions["chain"], x * 2, y)
    np.testing.assert_array_equal(first, np.exp(x * y + y) - x)
    np.testing.assert_array_equal(second, np.exp(x * 2 * y + y) - x * 2)


def test_an_evaluation_error_names_the_line_of_its_call():
    """Errors: an evaluation-time bad input is an EvalError carrying the source location of the
    call (common rules); the straight-line plan keeps the walk's location handling."""
    source = "\n".join(
        [
            "from tilefoundry.dsl import tf",
            "from tilefoundry.frontend import Tensor, func",
            "",
            "",
            "@func",
            'def divide(x: Tensor[(3,), "i32"], y: Tensor[(3,), "i32"]):',
            "    z = x + y",
            "    return tf.floor_div(z, y)",
            "",
        ]
    )
    fn = parse_source(source, "<divide>")["divide"]
    x = np.arange(3, dtype=np.int32)
    with pytest.raises(EvalError, match=r"integer floor_div by zero(.|\n)*<divide>:8"):
        evaluate(fn, x, np.array([1, 0, 2], np.int32))
