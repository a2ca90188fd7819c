"""One worker process with 8 XLA CPU devices for every multi-device test of this directory.

XLA fixes its CPU device count when jax first initialises a backend, and other test modules in
the same pytest process (the single-device StableHLO tests) initialise it with one device long
before these tests run; setting XLA_FLAGS here would be too late and would leak into them. So
the multi-device runs happen in a separate, freshly spawned interpreter whose initializer sets
`XLA_FLAGS=--xla_force_host_platform_device_count=8` before it imports jax. The worker is
started once per session and reused; only program names and numpy arrays cross the boundary.
Emission, parsing and the reference evaluator run in-process (they never initialise a backend).
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from exits.spmd import spmd_worker


@pytest.fixture(scope="session")
def devices8():
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=spmd_worker.start,
    )
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)
