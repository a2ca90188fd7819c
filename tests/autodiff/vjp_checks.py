"""The two truths a VJP is checked against (issue 25 item 5), shared by the case table
(`test_rules.py`) and the property tests (`test_finite_differences.py`):

- central finite differences in float64 of the forward program on the evaluator: for a random
  output cotangent ct and a random direction v of each input, <ct, (f(x + eps v) - f(x - eps v))
  / 2 eps> = <vjp(ct), v> (the defining property of the transpose), and
- `jax.vjp` of the same math written in jax.numpy, input by input.
"""

import numpy as np
import pytest

from autodiff.rule_cases import Case
from tilefoundry import vjp
from tilefoundry.evaluator import evaluate
from tilefoundry.passes import verify


def _as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def float_inputs(case: Case) -> tuple[int, ...]:
    if case.argnums is not None:
        return case.argnums
    return tuple(i for i, inp in enumerate(case.inputs) if inp.value is None)


def _float_outputs(outputs) -> tuple[np.ndarray, ...]:
    """The outputs a cotangent flows into (integer and bool outputs carry none)."""
    return tuple(o for o in outputs if np.asarray(o).dtype.kind == "f")


def _cotangents(outputs, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(
        rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype)
        for o in _float_outputs(outputs)
    )


def backward(case: Case, seed: int = 0):
    """(forward program, its inputs, output cotangents, the transform's input cotangents)."""
    fn = case.program()
    back = vjp(fn, argnums=float_inputs(case))
    verify(back)
    arrays = case.arrays(seed)
    outputs = _as_tuple(evaluate(fn, *arrays))
    cts = _cotangents(outputs, seed=seed + 1)
    got_outputs, got = evaluate(back, *arrays, *cts)
    for got_output, output in zip(_as_tuple(got_outputs), outputs, strict=True):
        np.testing.assert_array_equal(got_output, output)  # the forward half is the forward
    return fn, arrays, cts, got


def assert_finite_differences(case: Case, seed: int = 0) -> None:
    fn, arrays, cts, got = backward(case, seed)
    rng = np.random.default_rng(seed + 2)
    for index, cotangent in zip(float_inputs(case), got, strict=True):
        direction = rng.standard_normal(arrays[index].shape)

        def at(step, index=index, direction=direction):
            moved = list(arrays)
            moved[index] = arrays[index] + step * direction
            return _float_outputs(_as_tuple(evaluate(fn, *moved)))

        plus, minus = at(case.step), at(-case.step)
        numeric = sum(
            float(np.sum(ct * (p - m))) for ct, p, m in zip(cts, plus, minus, strict=True)
        ) / (2 * case.step)
        analytic = float(np.sum(cotangent * direction))
        assert abs(numeric - analytic) <= case.tolerance * max(1.0, abs(analytic)), (
            f"{case.name}: input {index}: finite differences {numeric}, vjp {analytic}"
        )


def assert_matches_jax(case: Case, seed: int = 0) -> None:
    jax = pytest.importorskip("jax", reason="the jax reference needs jax")
    import jax.numpy as jnp

    _, arrays, cts, got = backward(case, seed)
    indices = float_inputs(case)

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
