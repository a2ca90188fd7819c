"""Shared test machinery: the one `--update-golden` switch for every golden-text test, the one
8-device worker process, and a fixture that starts a test from empty process-wide caches."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from support import device_worker
from tilefoundry.caches import clear_all

GOLDEN_DIR = Path(__file__).parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite golden files from the current output instead of comparing",
    )


@pytest.fixture
def golden(request):
    """`golden("name.txt", text)` compares `text` with tests/golden/name.txt (or rewrites it)."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str) -> None:
        path = GOLDEN_DIR / name
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        if not path.exists():
            pytest.fail(f"golden file {path} is missing; run pytest --update-golden and review it")
        assert text == path.read_text(), f"output differs from golden {path}"

    return check


@pytest.fixture(scope="session")
def devices8():
    """One worker process with 8 XLA CPU devices for every multi-device run of the session
    (`support/device_worker.py` says why it is a process). It is started once, on first use,
    and reused; only names and numpy arrays cross the boundary. Emission, parsing and the
    reference evaluator run in this process (they never initialise a backend)."""
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=device_worker.start,
    )
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


@pytest.fixture
def fresh_caches():
    """Every process-wide cache emptied before the test and after it (`tilefoundry.caches`):
    the test sees what a new process would see, and leaves none of its entries behind."""
    clear_all()
    yield
    clear_all()
