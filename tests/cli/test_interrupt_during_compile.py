"""Ctrl-C while XLA compiles a big program.

Issue 20: "Ctrl-C during an XLA compile prints "interrupted" and then segfaults (3 of 3 on a
4,000-op program)"; what to build: "Interrupts: Ctrl-C at any point exits 130 with one line, no
traceback, no segfault".

The SIGINT is sent once XLA's CPU compiler is seen running in the child (its `llvm-worker`
threads exist, Linux /proc), and the run has not printed its results yet, so the interrupt lands
inside the compile, not before or after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cli.conftest import command as cli_command
from cli.conftest import signal_when

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess

OPS = 1000
"""Statements of four ops each: about 4,000 ops, which XLA takes tens of seconds to compile."""

BIG = (
    "from tilefoundry import Tensor, func\n"
    "from tilefoundry.dsl import tf\n\n"
    "@func\n"
    'def big(x: Tensor[(64,), "f32"]) -> Tensor[(64,), "f32"]:\n'
    "    y = x\n" + "    y = tf.exp(tf.neg(y)) * x + y\n" * OPS + "    return y\n"
)


def _compiling(pid: int) -> bool:
    """Whether XLA's CPU compiler threads run in process `pid`."""
    for comm in Path(f"/proc/{pid}/task").glob("*/comm"):
        try:
            if comm.read_text().startswith("llvm-worker"):
                return True
        except OSError:  # the thread ended meanwhile
            continue
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads thread names in /proc")
def test_ctrl_c_while_xla_compiles_exits_130_with_one_line(tmp_path):
    path = tmp_path / "big.py"
    path.write_text(BIG, encoding="utf-8")
    child = subprocess.Popen(
        [*cli_command(), "run", "--backend", "xla", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TILEFOUNDRY_TRACEBACK": "1"},
    )
    out, err = signal_when(child, lambda: _compiling(child.pid), "XLA's compiler starting")
    assert child.returncode != -signal.SIGSEGV, err
    assert child.returncode == 130, (child.returncode, err)
    assert err == "interrupted\n"
    assert "xla: compile" not in out  # it was interrupted, not finished
