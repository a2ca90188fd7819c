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
from tilefoundry import vjp
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.passes import verify

EPS = 1e-6


def _as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def _float_inputs(case: Case) -> tuple[int, ...]:
    if case.argnums is not None:
        return case.argnums
    return tuple(i for i, inp in enumerate(case.inputs) if inp.value is None)


def _cotangents(outputs, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype) for o in outputs)


def _backward(case: Case):
    fn = case.program()
    back = vjp(fn, argnums=_float_inputs(case))
    verify(back)
    arrays = case.arrays()
    outputs = _as_tuple(evaluate(fn, *arrays))
    cts = _cotangents(outputs, seed=1)
    got_outputs, got = evaluate(back, *arrays, *cts)
    for got_output, output in zip(_as_tuple(got_outputs), outputs, strict=True):
        np.testing.assert_array_equal(got_output, output)  # the forward half is the forward
    return fn, arrays, cts, got


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if "no finite differences" not in c.tags],
    ids=lambda c: c.name,
)
def test_vjp_equals_central_finite_differences(case):
    fn, arrays, cts, got = _backward(case)
    rng = np.random.default_rng(2)
    for index, cotangent in zip(_float_inputs(case), got, strict=True):
        direction = rng.standard_normal(arrays[index].shape)

        def at(step, index=index, direction=direction):
            moved = list(arrays)
            moved[index] = arrays[index] + step * direction
            return _as_tuple(evaluate(fn, *moved))

        plus, minus = at(EPS), at(-EPS)
        numeric = sum(
            float(np.sum(ct * (p - m))) for ct, p, m in zip(cts, plus, minus, strict=True)
        ) / (2 * EPS)
        analytic = float(np.sum(cotangent * direction))
        assert abs(numeric - analytic) <= case.tolerance * max(1.0, abs(analytic)), (
            f"{case.name}: input {index}: finite differences {numeric}, vjp {analytic}"
        )


@pytest.mark.slow  # jax traces and compiles each case: a second or more apiece
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_vjp_equals_jax(case):
    jax = pytest.importorskip("jax", reason="the jax reference needs jax")
    import jax.numpy as jnp

    _, arrays, cts, got = _backward(case)
    indices = _float_inputs(case)

    def math(*chosen):
        full = list(arrays)
        for index, value in zip(indices, chosen, strict=True):
            full[index] = value
        return case.math(jnp, *full)

    with jax.enable_x64(True):
        outputs, pullback = jax.vjp(math, *(arrays[i] for i in indices))
        single = not isinstance(outputs, tuple)
        want = pullback(cts[0] if single else cts)
    for index, mine, theirs in zip(indices, got, want, strict=True):
        theirs = np.asarray(theirs)
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, case.name
        scale = max(1.0, float(np.max(np.abs(theirs))))
        np.testing.assert_allclose(
            mine, theirs, rtol=case.tolerance, atol=case.tolerance * scale,
            err_msg=f"{case.name}: input {index}",
        )  # fmt: skip


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
