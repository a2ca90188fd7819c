"""Timing helpers for the benchmark scripts: best-of-N wall time, printed as ratios to a peer.

The machines are noisy 2-core boxes, so every script measures its peer in the same run and reports
the ratio; absolute figures are printed for context only.
"""

from __future__ import annotations

import time
from collections.abc import Callable


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
