"""Each benchmark script still runs end to end: `--quick` (tiny sizes, one repeat) in a subprocess,
exit status 0, and its JSON written. Timings are never asserted (DESIGN §7): the numbers belong to
the scripts' own output, read as ratios on a quiet machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs a benchmark script in a subprocess

pytest.importorskip("jax", reason="the benchmarks compare against jax")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = [
    "compile_scaling",
    "execute_xla",
    "reference_eval",
    "fusion_traffic",
    "communication",
    "backward",
    "train_step",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_run_writes_its_results(script: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{script}.py"), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((tmp_path / f"{script}.json").read_text())
    assert results["script"] == f"benchmarks/{script}.py"
    assert results["rows"]
