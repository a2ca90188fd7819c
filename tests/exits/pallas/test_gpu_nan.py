# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A NaN survives max and min in a kernel's GPU form as it does in the reference (issue 27).

jax's Triton lowering (jax/_src/pallas/triton/lowering.py, pinned 0.10.2) lowers a float
`max` / `min` — elementwise and inside a reduction — to `arith.maxnumf` / `minnumf`, which
return the other operand of a NaN; numpy and StableHLO (the reference evaluator, the XLA exits)
return NaN. Interpret mode on a CPU cannot show the difference (its max propagates NaN), so these
tests model Triton's semantics: jnp's maximum / minimum / max / min are replaced by NaN-dropping
ones while the kernel is traced, and the kernel's GPU form must still equal the evaluator. The
same kernels traced without a GPU backend (no guard) do drop the NaN under the model: the model
bites, and the guard is what keeps the NaN.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.pallas import run_pallas


@func
def pairwise(x: Tensor[(8, 16), "f32"], y: Tensor[(8, 16), "f32"]):
    return tf.maximum(x, y), tf.minimum(x, y), tf.relu(x), tf.clamp(x, y, y + 1.0)


@func
def row_max(x: Tensor[(8, 16), "f32"]):
    return tf.reduce(x, axes=(1,), keepdim=False, kind="max"), tf.reduce(
        x, axes=(0,), keepdim=True, kind="abs_max"
    )


def _nan_dropping(monkeypatch):
    """jnp's max family with maxnumf / minnumf semantics (a NaN operand yields the other)."""
    maximum, minimum, amax, amin = jnp.maximum, jnp.minimum, jnp.max, jnp.min

    def dropping(pick):
        return lambda a, b: jnp.where(jnp.isnan(a), b, jnp.where(jnp.isnan(b), a, pick(a, b)))

    def reducing(pick, skip):
        def reduce(x, axis=None, keepdims=False, **kwargs):
            x = jnp.asarray(x)
            if jnp.issubdtype(x.dtype, jnp.floating):
                x = jnp.where(jnp.isnan(x), skip, x)
            return pick(x, axis=axis, keepdims=keepdims, **kwargs)

        return reduce

    monkeypatch.setattr(jnp, "maximum", dropping(maximum))
    monkeypatch.setattr(jnp, "minimum", dropping(minimum))
    monkeypatch.setattr(jnp, "max", reducing(amax, -jnp.inf))
    monkeypatch.setattr(jnp, "min", reducing(amin, jnp.inf))


def _with_nans(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    x[1, 3] = x[4, 0] = x[6, 15] = np.nan
    return x


CASES = {
    "pairwise": (pairwise, lambda: (_with_nans((8, 16), 1), _with_nans((8, 16), 2)[::-1].copy())),
    "row_max": (row_max, lambda: (_with_nans((8, 16), 3),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gpu_form_keeps_a_nan_under_tritons_nan_dropping_max(name, monkeypatch):
    fn, arrays = CASES[name]
    arrays = arrays()
    want = evaluate(fn, *arrays)
    assert any(np.isnan(w).any() for w in want)
    _nan_dropping(monkeypatch)
    got = run_pallas(fn, *arrays, interpret=True, gpu_backend="triton")
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", sorted(CASES))
def test_without_the_guard_the_model_drops_the_nan(name, monkeypatch):
    """Traced without a GPU backend (the plain interpret form), the same kernel under the model
    loses a NaN the reference keeps — what a GPU would do without `kx.maximum` / `kx.max`."""
    fn, arrays = CASES[name]
    arrays = arrays()
    want = evaluate(fn, *arrays)
    _nan_dropping(monkeypatch)
    got = run_pallas(fn, *arrays, interpret=True)
    assert any(np.isnan(w).sum() > np.isnan(g).sum() for g, w in zip(got, want, strict=True)), (
        "the NaN-dropping model did not change the plain form"
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_guarded_kernels_lower_through_triton(name):
    from tilefoundry.exits.pallas import Triton, lower_for_cuda

    fn, arrays = CASES[name]
    assert lower_for_cuda(fn, *arrays()).count(f"@{Triton.custom_call}") == 1
