"""VJP rules on simulated devices (issue 25 items 3 and 5, DESIGN §4.12, §4.18): the validator's
VJP mode over the whole catalog (`python -m tilefoundry.evaluator.validate --vjp`; its engine is
`evaluator/validation_vjp.py`, its mutation tests tests/evaluator/test_validate_vjp.py). For every
op with a VJP rule, each CI sample, and each per-mesh-axis input state (Broadcast, each Split,
Partial(sum)) the forward's typeinfer accepts, the backward program must type and, run on the
simulated devices with adversarial inputs and cotangents, equal the unsharded backward. CI runs a
thin slice (every op, its first CI sample, seed 0); the slow tests run every CI sample on the four
seeds the issue asks 0 unsound on, as `--vjp --seed 0..3` does.
"""

import numpy as np
import pytest

import tilefoundry.ir.hir  # noqa: F401  (registers every op)
from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.evaluator.validate import validate, vjp_catalog_samples
from tilefoundry.evaluator.validation_checks import Settings
from tilefoundry.ir.core import Var
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import Split, make_mesh
from tilefoundry.sharding.shard_reading import canonical_splits


def _vjp_validation(seed, samples=None):
    sampled, not_sampled = vjp_catalog_samples()
    settings = Settings(seed=seed, vjp=True, samples=samples)
    return validate(sampled, settings, not_sampled=not_sampled)


def _assert_sound(report):
    assert report.unsound == [], report.unsound
    assert report.untyped == [], report.untyped
    assert report.broken_samples == [], report.broken_samples
    assert report.not_executable == [], report.not_executable
    unproven = sorted(name for name, tally in report.tallies.items() if not tally.accepted)
    assert unproven == [], f"no sharded input state of these ops' samples was checked: {unproven}"


def test_every_vjp_rule_is_sound_on_its_first_sample():
    _assert_sound(_vjp_validation(seed=0, samples=1))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_every_vjp_rule_is_sound_on_every_sample(seed):
    _assert_sound(_vjp_validation(seed))


SEQ = make_mesh((4,), ("tp",))


@pytest.mark.parametrize(
    "build",
    [
        lambda x, w: tf.matmul(x, w),
        lambda x, w: tf.rms_norm(x, tf.reduce(w, axes=(1,), keepdim=False, kind="sum")),
    ],
    ids=["x @ w", "rms_norm"],
)
def test_a_sequence_split_backward_keeps_every_layout_canonical(build):
    """The SPMD exit reads only canonical layouts (each Split the outermost factor of its
    logical axis): the backward of a (batch, seq @ tp, hidden) activation must not merge the
    split seq axis into an inner factor (MatMul's weight gradient, sum_to's batch sums)."""
    x = Var("x", make_shard_tensor_type((2, 8, 16), mesh=SEQ, attrs=(Split(1),)))
    w = Var("w", make_tensor_type((16, 16)))
    body = tf.reduce(build(x, w), axes=(0, 1, 2), keepdim=False, kind="sum")
    fn = Function("f", (x, w), body, TypeInferContext().infer(body))
    backward = grad(fn, argnums=(0, 1))
    for node in iter_nodes(backward.body):
        canonical_splits(node.type, "test", "the SPMD exit")  # raises on an inner-factor split
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, 8, 16)), rng.standard_normal((16, 16))
    twin_x = Var("x", make_tensor_type((2, 8, 16)))
    twin_body = tf.reduce(build(twin_x, w), axes=(0, 1, 2), keepdim=False, kind="sum")
    twin = Function("g", (twin_x, w), twin_body, TypeInferContext().infer(twin_body))
    got = evaluate(backward, *[v.astype(np.float32) for v in values])
    want = evaluate(grad(twin, argnums=(0, 1)), *[v.astype(np.float32) for v in values])
    for g, t in zip(got, want, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(t))))
