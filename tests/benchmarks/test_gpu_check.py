"""benchmarks/gpu_check.py --dry-run (issue 27 item 6): on a machine without a GPU it lowers every
example kernel, its jax peers and the 8-device Llama module for cuda, in a subprocess, and its
table says that nothing was measured. Without --dry-run and without a GPU it refuses to run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a benchmark script in a subprocess

pytest.importorskip("jax", reason="the GPU check lowers through jax")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300
    )


def test_the_dry_run_lowers_everything_for_cuda_and_measures_nothing(tmp_path: Path) -> None:
    run = _run("--dry-run", "--out", str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert results["dry_run"] is True and results["device"] == "none (dry run)"
    programs = {(row[0], row[1]) for row in results["rows"]}
    assert programs == {
        ("tiled_matmul", "tilefoundry (Triton)"), ("tiled_matmul", "jax.jit"),
        ("online_softmax", "tilefoundry (Triton)"), ("online_softmax", "jax.jit"),
        ("flash_attention", "tilefoundry (Triton)"), ("flash_attention", "jax.jit"),
        ("flash_attention", "jax.nn.dot_product_attention"), ("llama_tp", "run_xla (SPMD)"),
    }  # fmt: skip
    assert all(
        row[2].startswith("lowered for cuda (dry run") and not row[3] for row in results["rows"]
    )


def _has_gpu() -> bool:
    import jax

    return jax.default_backend() == "gpu"


@pytest.mark.skipif("_has_gpu()", reason="with a GPU the script runs the full check")
def test_without_a_gpu_only_the_dry_run_runs(tmp_path: Path) -> None:
    run = _run("--out", str(tmp_path))
    assert run.returncode == 2 and "use --dry-run" in run.stdout
    assert not (tmp_path / "gpu_check.json").exists()
