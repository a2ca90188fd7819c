"""Running the `tilefoundry` command the way users do: the installed console script (falling back
to `python -m tilefoundry` only where the script is not on PATH), in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def command() -> list[str]:
    script = shutil.which("tilefoundry")
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
