"""`tilefoundry run FILE --backend pallas` and `tilefoundry emit FILE --pallas` (DESIGN §3 CLI;
issue 18), through the installed command as users run it."""

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "pallas"


def test_run_the_flash_attention_kernel_on_the_pallas_backend(cli):
    done = cli("run", "examples/flash_attention.py", "--backend", "pallas")
    assert done.returncode == 0, done.stderr
    assert "on pallas" in done.stdout
    assert "agrees, max |diff|" in done.stdout and "pallas: build + run" in done.stdout


def test_emit_pallas_prints_the_pinned_launch_then_the_kernel_jaxpr(cli, tmp_path):
    done = cli("emit", "examples/tiled_matmul.py", "--pallas")
    assert done.returncode == 0, done.stderr
    summary = (GOLDEN / "tiled_matmul.txt").read_text()
    assert done.stdout.startswith(summary)
    assert "pallas_call[" in done.stdout and "scan[" in done.stdout
    out = tmp_path / "kernel.txt"
    written = cli("emit", "examples/flash_attention.py", "--pallas", "-o", str(out))
    assert written.returncode == 0, written.stderr
    assert out.read_text().startswith((GOLDEN / "flash_attention.txt").read_text())


def test_a_device_mesh_program_is_refused_by_the_pallas_backend(cli):
    done = cli("run", "examples/megatron_mlp.py", "--backend", "pallas")
    assert done.returncode != 0
    assert "'device' mesh" in done.stderr and "run_xla" in done.stderr
    assert "Traceback" not in done.stderr


def test_gpu_backend_names_the_lowering_and_checks_it_while_interpreting(cli):
    """Issue 27: `--gpu-backend triton` interprets the kernel and checks Triton's constraints on
    a CPU machine (compiles it on a GPU one); the run line says which. Without --backend pallas
    it is refused."""
    done = cli(
        "run", "examples/online_softmax.py", "--backend", "pallas", "--gpu-backend", "triton"
    )
    assert done.returncode == 0, done.stderr
    modes = ("(interpret mode, Triton's constraints checked)", "(compiled by Triton)")
    assert any(f"on pallas {mode}" in done.stdout for mode in modes), done.stdout
    assert "agrees, max |diff|" in done.stdout
    refused = cli("run", "examples/online_softmax.py", "--gpu-backend", "triton")
    assert refused.returncode != 0 and "add --backend pallas" in refused.stderr
    assert "Traceback" not in refused.stderr
