# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Pad, Reverse, Cumulative, Clamp and Iota inside one Pallas kernel on a cta mesh (interpret
mode on CPU), equal to an independent float64 numpy reference and to the oracle, as written and
after `compile`: each CTA holds a block of rows and works along the unsplit axis."""

import numpy as np
import pytest

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types.shard import make_mesh
from tilefoundry.passes import compile

pytest.importorskip("jax", reason="the Pallas exit needs jax")

from tilefoundry.exits.pallas import run_pallas

CTA = make_mesh((4,), ("x",), topology="cta")
RTOL, ATOL = 1e-5, 1e-6


@func
def row_scan(x: Tensor[(16 @ CTA.x, 6), "f32"]):
    padded = tf.pad(x, (0, 1), (0, 1), value=0.0)
    scanned = tf.cummax(tf.reverse(padded, (1,)), 1) + tf.cumsum(padded, 1, reverse=True)
    ramp = tf.cast(tf.iota((16, 8), "i32", axis=1), "f32") * 0.25
    return tf.clamp(scanned - ramp, -1.0, 2.0)


def _reference(x):
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1)))
    scanned = np.maximum.accumulate(padded[:, ::-1], axis=1)
    suffix = np.cumsum(padded[:, ::-1], axis=1)[:, ::-1]
    return np.clip(scanned + suffix - np.arange(8) * 0.25, -1.0, 2.0)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_structural_ops_run_in_one_kernel(compiled):
    fn = compile(row_scan)[0] if compiled else row_scan
    x = np.random.default_rng(6).standard_normal((16, 6)).astype(np.float32)
    got = run_pallas(fn, x, interpret=True)
    np.testing.assert_allclose(got, _reference(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, evaluate(fn, x), rtol=RTOL, atol=ATOL)
