"""Meshes the exits must spell or place (issue 28: "a mesh axis named `τ` (a valid identifier) is
written raw into the Shardy attributes and aborts the process"; "a split over a 1-device mesh
fails on XLA with a raw `JaxRuntimeError`")."""

from __future__ import annotations

import numpy as np

from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.frontend import parse_source


def _program(mesh: str, annotation: str) -> object:
    return parse_source(
        "from tilefoundry import Tensor, func\nfrom tilefoundry.dsl import tf\n"
        "from tilefoundry.ir.types.shard import make_mesh\n\n"
        f"M = make_mesh{mesh}\n\n@func\ndef f(x: {annotation}):\n    return tf.exp(x)\n",
        "mesh.py",
    )["f"]


def test_axis_names_are_spelled_in_ascii_and_kept_apart():
    """Mangled as function names are (`τ` is `_U3C4_`); two that mangle alike get a suffix."""
    fn = _program('((2, 2), ("aτ", "a_U3C4_"))', 'Tensor[(4 @ M.aτ, 4 @ M.a_U3C4_), "f32"]')
    text = emit_stablehlo(fn)
    assert text.isascii()
    assert 'sdy.mesh @mesh = <["a_U3C4_"=2, "a_U3C4__1"=2]>' in text
    assert '#sdy.sharding<@mesh, [{"a_U3C4_"}, {"a_U3C4__1"}]>' in text


def test_a_device_mesh_of_one_device_runs_as_one_device():
    fn = _program('((1,), ("x",))', 'Tensor[(4 @ M.x, 4), "f32"]')
    assert "sdy." not in emit_stablehlo(fn)  # nothing for a partitioner that never runs
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_allclose(run_xla(fn, x), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(run_xla(fn, x, devices=1), np.exp(x), rtol=1e-6)
