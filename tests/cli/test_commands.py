"""Each subcommand through the installed `tilefoundry` script, on the shipped examples."""

import numpy as np
import pytest

from cli.conftest import EXAMPLES

EXAMPLE_FILES = sorted(p.name for p in EXAMPLES.glob("*.py"))


def test_the_examples_are_the_documented_fourteen():
    assert EXAMPLE_FILES == [
        "dispatch_kernel.py",
        "flash_attention.py",
        "gpt2.py",
        "llama.py",
        "megatron_grad.py",
        "megatron_mlp.py",
        "mesh_2d.py",
        "mlp.py",
        "moe.py",
        "online_softmax.py",
        "tiled_matmul.py",
        "tiled_reduction.py",
        "train_llama.py",
        "transformer_block.py",
    ]


@pytest.mark.slow
def test_help_teaches_with_examples(cli):
    top = cli("--help")
    assert top.returncode == 0
    assert "tilefoundry run examples/transformer_block.py --backend xla" in top.stdout
    for command in ("check", "show", "emit", "run", "report", "validate", "demo"):
        assert command in top.stdout
    run_help = cli("run", "--help")
    assert "--inputs" in run_help.stdout and "tilefoundry run examples/mlp.py" in run_help.stdout


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_every_example_runs_and_agrees_with_the_oracle(cli, name):
    done = cli("run", f"examples/{name}")
    assert done.returncode == 0, done.stderr
    assert "agrees, max |diff|" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_loss_over_token_ids_runs_on_random_tokens(cli):
    """GPT-2's loss gathers its embedding rows at the token ids: the random tokens are drawn
    inside the vocabulary (not refused by Gather as out of range)."""
    done = cli("run", "examples/gpt2.py", "--func", "gpt2_loss")
    assert done.returncode == 0, done.stderr
    assert "agrees, max |diff|" in done.stdout


def test_check_reports_every_function(cli):
    done = cli("check", "examples/dispatch_kernel.py")
    assert done.returncode == 0, done.stderr
    assert "RowSoftmax.normalize, RowSoftmax.entry" in done.stdout


def test_show_prints_ir_and_where_sharded_values_live(cli):
    done = cli("show", "examples/mesh_2d.py")
    assert done.returncode == 0, done.stderr
    assert "func @mesh_2d(" in done.stdout
    assert "x: split dim 0, y: partial sum" in done.stdout
    assert "[8, 8] x 8" in done.stdout  # a 16x8 value split 2 ways by rows: 8x8 per device
    assert "y: all-reduce(sum)" in done.stdout
    assert "memory per device (estimate from the types): " in done.stdout


def test_run_refuses_a_program_over_its_device_memory_budget_before_running(cli):
    done = cli("run", "examples/megatron_mlp.py", "--device-memory", "1K")
    assert done.returncode == 1
    assert "error: run: Function megatron_mlp needs about " in done.stderr
    assert "more than the 1.0 KiB per device of --device-memory" in done.stderr
    assert "oracle" not in done.stdout  # refused before anything ran
    fits = cli("run", "examples/megatron_mlp.py", "--device-memory", "80G")
    assert fits.returncode == 0, fits.stderr


def test_show_fused_prints_regions_and_the_report(cli):
    done = cli("show", "examples/mlp.py", "--fused")
    assert done.returncode == 0, done.stderr
    assert "fusion(" in done.stdout and "kind=contraction" in done.stdout
    # one region: the output bias add is the second matmul's epilogue (issue 19), and the
    # first matmul's bias/gelu epilogue is that matmul's prologue
    assert "1 fusion region(s)" in done.stdout


@pytest.mark.slow
def test_emit_text_file_and_portable_artifact(cli, tmp_path):
    text = cli("emit", "examples/mlp.py")
    assert text.returncode == 0, text.stderr
    assert "stablehlo.dot_general" in text.stdout
    out = tmp_path / "n600.mlir"
    bound = cli("emit", "examples/dispatch_kernel.py", "--dim", "N=600", "-o", str(out))
    assert bound.returncode == 0, bound.stderr
    assert "tensor<4x600xf32>" in out.read_text()
    portable = tmp_path / "mlp.vhlo"
    done = cli("emit", "examples/mlp.py", "--portable", "-o", str(portable))
    assert done.returncode == 0, done.stderr
    assert portable.read_bytes()[:4] == b"ML\xefR"  # the MLIR bytecode magic


@pytest.mark.slow
@pytest.mark.parametrize(("extent", "variant"), [("100", "short"), ("600", "long")])
def test_dispatch_variants_run_on_xla(cli, extent, variant):
    done = cli("run", "examples/dispatch_kernel.py", "--dim", f"N={extent}", "--backend", "xla")
    assert done.returncode == 0, done.stderr
    assert f"DimVars: N={extent}" in done.stdout and "agrees" in done.stdout


@pytest.mark.slow
def test_transformer_block_on_xla(cli):
    done = cli("run", "examples/transformer_block.py", "--backend", "xla", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert "on xla (seed 3)" in done.stdout and "agrees" in done.stdout


@pytest.mark.slow
def test_megatron_on_eight_xla_devices(cli):
    done = cli("run", "examples/megatron_mlp.py", "--backend", "xla", "--devices", "8")
    assert done.returncode == 0, done.stderr
    assert "xla on 8 devices" in done.stdout and "agrees" in done.stdout


BODY_MESH = """\
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((4,), ("tp",))
REPLICATED = ShardLayout(Layout((8, 4)), (B,), TP)


@func
def body_mesh(x: Tensor[(8, 4), "f32"]):
    y = tf.reshard(x, layout=(8 @ TP.tp, 4), storage="gmem")
    return tf.reshard(tf.relu(y), layout=REPLICATED, storage="gmem") + x
"""


@pytest.mark.slow
def test_a_mesh_only_the_body_uses_sets_the_device_count(cli, write_program):
    """Issue 28: the CLI asks the program's devices of the one IR fact the exits read
    (`ir.hir.facts.device_count`), so a mesh that appears only inside the body runs on its
    devices instead of reaching XLA as a one-device program."""
    path = write_program("body_mesh.py", BODY_MESH)
    done = cli("run", path, "--backend", "xla")
    assert done.returncode == 0, done.stderr
    assert "xla on 4 devices" in done.stdout and "agrees" in done.stdout
    done = cli("run", path, "--backend", "xla", "--devices", "4")
    assert done.returncode == 0, done.stderr
    assert "xla on 4 devices" in done.stdout and "agrees" in done.stdout
    done = cli("run", path, "--devices", "2")
    assert done.returncode == 1
    assert "its mesh has 4 devices; --devices 2 does not match" in done.stderr


@pytest.mark.slow
def test_run_reads_npy_inputs(cli, tmp_path):
    rng = np.random.default_rng(7)
    paths = []
    for name, shape in (("x", (8, 256)),):
        path = tmp_path / f"{name}.npy"
        np.save(path, rng.standard_normal(shape).astype(np.float32))
        paths.append(str(path))
    done = cli("run", "examples/tiled_reduction.py", "--inputs", *paths)
    assert done.returncode == 0, done.stderr
    assert "inputs (from --inputs)" in done.stdout
    x = np.load(paths[0])
    assert f"{x.sum(axis=1).mean():.4g}" in done.stdout  # the row sums' mean, as computed


@pytest.mark.slow
def test_validate_passes_its_flags_through(cli):
    done = cli("validate", "--op", "Binary", "--samples", "2", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "Binary" in done.stdout
