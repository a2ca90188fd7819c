"""Running the `tilefoundry` command the way users do: the installed console script of the
interpreter running the tests (else the one on PATH, else `python -m tilefoundry`), in a
subprocess. The interpreter's own script comes first so that a virtual environment's run tests
that environment's install, not whichever one PATH finds first."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def command() -> list[str]:
    beside = Path(sys.executable).parent / "tilefoundry"
    script = str(beside) if beside.is_file() else shutil.which("tilefoundry")
    return [script] if script else [sys.executable, "-m", "tilefoundry"]


def tilefoundry(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([*command(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def signal_when(
    child: subprocess.Popen, ready: Callable[[], bool], what: str, sig: int = signal.SIGINT
) -> tuple[str, str]:
    """Send `sig` to `child` once `ready()` holds (failing if the child ends first, or `what`
    does not happen within two minutes), then its (stdout, stderr); the child never outlives
    the call."""
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, f"{what} never happened"
            time.sleep(0.01)
        child.send_signal(sig)
        return child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


@pytest.fixture
def cli():
    return tilefoundry


@pytest.fixture
def write_program(tmp_path):
    """A DSL file in tmp_path with the given text; returns its path as a string."""

    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write
