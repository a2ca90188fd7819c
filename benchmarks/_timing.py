"""Timing and reporting helpers for the benchmark scripts: medians of several runs, printed as
ratios to a peer, tables in Markdown, results as JSON.

The machines are noisy 2-core boxes shared with other work, so every script measures its peer in
the same run and reports the ratio; absolute figures are printed for context only. Medians (not
means) because a neighbour's test run shows up as a few very slow samples, not a shifted mean.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


def best_of(fn: Callable[[], object], repeats: int = 5) -> float:
    """The fastest of `repeats` runs, in seconds (the least noisy estimate of the cost)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def report(label: str, ours: float, peer: float, peer_name: str) -> str:
    return (
        f"{label}: tilefoundry {ours * 1e3:.1f} ms, {peer_name} {peer * 1e3:.1f} ms, "
        f"ratio {ours / peer:.2f}x"
    )


def calls_per_sample(fn: Callable[[], object], min_sample_s: float) -> int:
    """How many calls make one sample last at least `min_sample_s`: a call of a few microseconds
    timed alone is mostly timer and loop noise, so short calls are timed in batches."""
    number = 1
    while True:
        start = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - start >= min_sample_s or number >= 1 << 16:
            return number
        number *= 2


def interleaved_medians(
    ours: Callable[[], object],
    peer: Callable[[], object],
    repeats: int,
    *,
    min_sample_s: float = 0.0,
) -> tuple[float, float]:
    """Medians of `ours` and `peer`, sampled alternately so that a burst of load from a
    neighbour hits both sides rather than whichever happened to be running."""
    ours(), peer()
    n_ours = calls_per_sample(ours, min_sample_s) if min_sample_s > 0 else 1
    n_peer = calls_per_sample(peer, min_sample_s) if min_sample_s > 0 else 1
    ours_samples, peer_samples = [], []
    for _ in range(repeats):
        for fn, number, samples in ((ours, n_ours, ours_samples), (peer, n_peer, peer_samples)):
            start = time.perf_counter()
            for _ in range(number):
                fn()
            samples.append((time.perf_counter() - start) / number)
    return statistics.median(ours_samples), statistics.median(peer_samples)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table, so that the printed output can be pasted into docs/performance.md."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def standard_arguments(description: str) -> argparse.ArgumentParser:
    """The flags every script takes: `--quick` (tiny sizes, one repeat: the smoke test's mode),
    `--repeats`, and `--out` (where the JSON goes, so a smoke run never overwrites real results)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=None, help="timed samples per side")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON")
    return parser


def repeats_for(args: argparse.Namespace, default: int) -> int:
    if args.repeats is not None:
        return args.repeats
    return 1 if args.quick else default


def write_results(out_dir: Path, script: str, payload: dict[str, Any]) -> Path:
    """`<out_dir>/<script>.json` with the environment the numbers came from."""
    import jax
    import numpy as np

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{script}.json"
    document = {
        "script": f"benchmarks/{script}.py",
        "environment": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "numpy": np.__version__,
            "jax": jax.__version__,
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        **payload,
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


def run_device_side(script: str, args: argparse.Namespace, repeats: int, devices: int) -> Any:
    """`script --device-side FILE` run in a subprocess whose XLA has `devices` CPU devices (this
    process keeps one), and the JSON it writes to FILE."""
    env = dict(os.environ)
    flag = f"--xla_force_host_platform_device_count={devices}"
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        out_file = Path(scratch) / "rows.json"
        command = [sys.executable, script, "--device-side", str(out_file)]
        command += ["--repeats", str(repeats), *(["--quick"] if args.quick else [])]
        subprocess.run(command, env=env, check=True)
        return json.loads(out_file.read_text())
