"""`emit --portable --platform` (issue 27 item 5): the one-device module as a jax.export artifact
declared for the platforms named, which jax can deserialise and run on each of them."""

import numpy as np
import pytest

pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")

from jax import export


def test_emit_portable_names_target_platforms(cli, tmp_path):
    """`emit --portable --platform cuda --platform cpu` writes a jax.export artifact declared
    for both; deserialised here it runs on the CPU and equals numpy."""
    pytest.importorskip("flatbuffers", reason="jax.export serialisation needs flatbuffers")
    out = tmp_path / "mlp.jax"
    args = ("examples/mlp.py", "--portable", "--platform", "cuda", "--platform", "cpu")
    done = cli("emit", *args, "-o", str(out))
    assert done.returncode == 0, done.stderr
    exported = export.deserialize(bytearray(out.read_bytes()))
    assert exported.platforms == ("cuda", "cpu")
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(a.shape).astype(a.dtype) for a in exported.in_avals]
    x, w1, b1, w2, b2 = (a.astype(np.float64) for a in arrays)
    hidden = x @ w1 + b1
    gelu = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))
    (got,) = exported.call(*arrays)
    np.testing.assert_allclose(got, gelu @ w2 + b2, rtol=1e-4, atol=1e-5)


def test_emit_platform_needs_portable_and_a_one_device_program(cli, tmp_path):
    done = cli("emit", "examples/mlp.py", "--platform", "cuda", "-o", str(tmp_path / "a"))
    assert done.returncode != 0 and "add --portable" in done.stderr
    args = ("--portable", "--platform", "cuda", "-o", str(tmp_path / "b"))
    done = cli("emit", "examples/megatron_mlp.py", *args)
    assert done.returncode != 0 and "sharded program" in done.stderr
