"""Running the `tilefoundry` command the way users do: the installed console script of the
interpreter running the tests (else the one on PATH, else `python -m tilefoundry`), in a
subprocess. The interpreter's own script comes first so that a virtual environment's run tests
that environment's install, not whichever one PATH finds first."""

from __future__ import annotations

import shutil
import subprocess
import sys
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
