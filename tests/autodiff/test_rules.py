"""Every VJP rule against the truth (issue 25 item 5, DESIGN §4.18): for each case of
`rule_cases.py` (op x shapes / attributes), the transform's vjp evaluated on the reference
evaluator equals
- central finite differences in float64 of the forward program on the evaluator: for a random
  output cotangent ct and a random direction v of each input, <ct, (f(x + eps v) - f(x - eps v))
  / 2 eps> = <vjp(ct), v> (the defining property of the transpose), and
- `jax.vjp` of the same math written in jax.numpy, input by input.
"""

import numpy as np
import pytest

from autodiff.rule_cases import CASES, Case, Input
from autodiff.vjp_checks import assert_finite_differences, assert_matches_jax
from tilefoundry import vjp
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "no finite differences" not in c.tags],
    ids=lambda c: c.name,
)
def test_vjp_equals_central_finite_differences(case):
    assert_finite_differences(case)


@pytest.mark.slow  # jax traces and compiles each case: a second or more apiece
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vjp_equals_jax(case):
    assert_matches_jax(case)


def test_cummax_splits_a_tie_evenly_between_the_tied_prefix_positions():
    """The cotangent of y_i = max(x_0..x_i) goes to the positions holding y_i, in equal shares
    (Reduce max's convention, and JAX's for `max`; JAX's cummax splits a tie by its scan tree,
    so the jax comparison avoids ties). x = 1, 1, 1, 1 and ct = 1, 2, 3, 4: output i gives
    ct_i / (i + 1) to each of x_0..x_i."""
    case = Case(
        "cummax ties",
        (Input((4,)),),
        lambda x: tf.cummax(x, axis=0),
        None,
    )
    back = vjp(case.program())
    _, (got,) = evaluate(back, np.ones(4), np.arange(1.0, 5.0))
    np.testing.assert_allclose(got, [1 + 1 + 1 + 1, 1 + 1 + 1, 1 + 1, 1])
