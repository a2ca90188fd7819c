"""One worker process with 8 XLA CPU devices for the model programs' runs on devices.

Same reason as tests/exits/spmd/conftest.py: XLA fixes its CPU device count when jax first
initialises, so the 8-device runs happen in a freshly spawned interpreter whose initializer sets
`XLA_FLAGS=--xla_force_host_platform_device_count=8` before it imports jax. Only a program's
name and numpy arrays cross the boundary.
"""

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest

from exits.spmd import spmd_worker


@pytest.fixture(scope="session")
def model_devices():
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=spmd_worker.start,
    )
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)
