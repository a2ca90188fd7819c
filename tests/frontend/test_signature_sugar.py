# ruff: noqa: F821
"""Shard-layout §7.5 sugar in a signature (issue 28 item 5), with the seed's own numbers.

§7.1.1: "rank(G) MAY differ from rank(T.shape)"; only size(G) == size(T.shape) must hold, so the
layout slot may spell a finer logical shape than the shape slot, each axis of the shape written
as consecutive extents.
"""

import numpy as np
import pytest

from exits.spmd import spmd_worker
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.types.shard import Layout, S, ShardLayout, make_mesh
from tilefoundry.ir.types.shard.shard_layout import shard_layout_local_shape

M = make_mesh((2, 4, 32), ("x", "y", "t"))
GRID = make_mesh((2, 4), ("x", "y"))


@func
def seed_example(x: Tensor[(2, 1536), "f32", (2 @ M.x, 12 @ M.y, 128 @ M.t)]):
    return tf.exp(x)


@func
def finer_canonical(x: Tensor[(2, 48), "f32", (2 @ GRID.x, 12 @ GRID.y, 4)]):
    return tf.exp(x) * 2.0


def test_the_seed_example_has_the_seeds_canonical_layout():
    """§7.5: layout shape (2, 4, 3, 32, 4), C-order strides (1536, 384, 128, 4, 1), attrs
    (Split(0), Split(1), Split(3)) (DESIGN §4.4: three attrs for three mesh axes), local shape
    (1, 1, 3, 1, 4)."""
    type_ = seed_example.params[0].type
    assert type_.shape == (2, 1536)
    assert type_.layout == ShardLayout(
        Layout((2, 4, 3, 32, 4), (1536, 384, 128, 4, 1)), (S(0), S(1), S(3)), M
    )
    assert shard_layout_local_shape(type_.layout) == (1, 1, 3, 1, 4)


def test_the_seed_example_runs_on_the_simulator_and_is_refused_at_the_device_exits_located():
    """Its t split is an inner factor of axis 1 (after the unsplit 3): the simulator holds that
    strided share (DESIGN §4.12); the SPMD exit (and run_xla through it) refuses it up front at
    the parameter's source line, since Shardy's shardings are contiguous blocks."""
    x = np.random.default_rng(0).standard_normal((2, 1536)).astype(np.float32)
    np.testing.assert_allclose(evaluate(seed_example, x), np.exp(x.astype(np.float64)), rtol=1e-6)
    inner = r"parameter 'x': mesh axis 2 \('t'\) splits an inner"
    with pytest.raises(UnsupportedError, match=inner) as caught:
        run_xla(seed_example, x, devices=256)
    assert caught.value.location is not None and caught.value.location.file == __file__


def test_a_finer_canonical_spelling_runs_on_every_exit(devices8):
    """(2 @ x, 12 @ y, 4) spells (2, 48) as (2, 4 y, 3, 4): every split is an outermost factor,
    so the simulator, run_xla and the SPMD exit all run it."""
    assert finer_canonical.params[0].type.layout == ShardLayout(
        Layout((2, 4, 3, 4), (48, 12, 4, 1)), (S(0), S(1)), GRID
    )
    x = np.random.default_rng(1).standard_normal((2, 48)).astype(np.float32)
    want = np.exp(x.astype(np.float64)) * 2.0
    np.testing.assert_allclose(evaluate(finer_canonical, x), want, rtol=1e-6)
    got = devices8.submit(
        spmd_worker.run_named, "frontend.test_signature_sugar", "finer_canonical", (x,), 8
    ).result(timeout=120)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


@pytest.mark.parametrize(
    ("slot", "match"),
    [
        # §7.1.1: size(G) == size(T.shape)
        ((4 @ GRID.x, 8), r"spells logical shape \(4, 8\) of size 32, but the shape slot"),
        # the same size grouped across the shape's axes: no op could read it
        ((4 @ GRID.x, 16), r"\(4, 16\), which does not factor the shape slot \(8, 8\) axis by"),
    ],
)
def test_a_layout_slot_must_cover_and_factor_the_shape(slot, match):
    with pytest.raises(VerifyError, match=match) as caught:

        @func
        def wrong(x: Tensor[(8, 8), "f32", slot]):
            return tf.exp(x)

    assert "test_signature_sugar.py" in str(caught.value)
