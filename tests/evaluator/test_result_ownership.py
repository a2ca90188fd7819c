"""evaluate hands out the arrays its kernels made without copying them, but never an alias of
the caller's inputs, of an IR constant or of another result (evaluator/boundary.py)."""

from __future__ import annotations

import numpy as np

from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source

SOURCE = """
from tilefoundry.frontend import Tensor, func


@func
def passthrough(x: Tensor[(3,), "f32"]):
    return x


@func
def twice(x: Tensor[(3,), "f32"]):
    y = x + x
    return y, y


@func
def chain(x: Tensor[(3,), "f32"]):
    a = x * x
    b = a + x
    c = b * a
    return c - b
"""


def _functions():
    return parse_source(SOURCE, "<ownership>")


def test_an_input_returned_unchanged_is_copied():
    """DESIGN §3 evaluate: results are the caller's own arrays; writing to one must not change
    the input the caller passed."""
    x = np.arange(3, dtype=np.float32)
    out = evaluate(_functions()["passthrough"], x)
    out[0] = 99.0
    assert x[0] == 0.0


def test_one_value_in_two_result_fields_gives_two_arrays():
    x = np.arange(3, dtype=np.float32)
    first, second = evaluate(_functions()["twice"], x)
    first[0] = 99.0
    np.testing.assert_array_equal(second, x + x)


def test_freeing_intermediates_keeps_the_result():
    """Intermediates are dropped after their last read; values read twice survive until then
    (compared with independent numpy)."""
    x = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    a = x * x
    b = a + x
    np.testing.assert_array_equal(evaluate(_functions()["chain"], x), b * a - b)
