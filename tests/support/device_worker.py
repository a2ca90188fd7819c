"""The start of the 8-device worker process (`devices8` in tests/conftest.py).

XLA fixes its CPU device count when jax first initialises a backend, and this pytest process
initialises it with one device long before a multi-device test runs, so those runs happen in a
freshly spawned interpreter: `start`, the pool initializer, asks for 8 devices before that
interpreter imports jax.
"""

import os

DEVICE_COUNT = 8


def start() -> None:
    flag = f"--xla_force_host_platform_device_count={DEVICE_COUNT}"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
