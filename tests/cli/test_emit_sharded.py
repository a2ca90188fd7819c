"""`tilefoundry emit` of a sharded program prints its SPMD module (issue 15 item 5: one emitter;
DESIGN §3), and `--portable` writes its artifact, as for an unsharded program."""

import re

import pytest

pytest.importorskip("jax", reason="emitting StableHLO needs jax[lib]")


def test_emit_of_the_megatron_example_prints_the_spmd_module(cli):
    from tilefoundry.exits.stablehlo.jaxlib_tools import parse_and_verify

    done = cli("emit", "examples/megatron_mlp.py")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert 'sdy.mesh @mesh = <["tp"=8]>' in text
    assert "sdy.manual_computation" in text and "mhlo.num_partitions = 8 : i32" in text
    assert re.findall(r'"stablehlo\.(all_reduce|reduce_scatter|all_gather)"', text) == [
        "all_reduce"
    ]
    parse_and_verify(text)


def test_emit_portable_of_a_sharded_program_writes_the_artifact(cli, tmp_path):
    out = tmp_path / "megatron.vhlo"
    done = cli("emit", "examples/megatron_mlp.py", "--portable", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes()[:4] == b"ML\xefR"  # the MLIR bytecode magic
