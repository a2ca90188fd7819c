"""Stopping the command with a signal at awkward moments (issue 28: "Ctrl-C while the command is
still importing gives a KeyboardInterrupt traceback; a Ctrl-C that lands inside jax's GC callback
is swallowed ... and the run exits 0; Ctrl-C or SIGTERM of `run --processes` leaves worker logs
and the global input `.npy` files in TMPDIR"). README: 130 interrupted (Ctrl-C), one line, no
traceback, never a signal; SIGTERM ends the command the same way with 143.

Each test runs the command in a child process and signals it once a /proc fact (Linux) or a line
it prints shows that it is at the moment under test.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli.conftest import REPO, command, signal_when

pytestmark = [  # every test here runs the command in a subprocess
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="watches it through /proc"),
]

PROGRAM = """\
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

@func
def f(x: Tensor[(4,), "f32"]):
    return tf.exp(x)
"""


def _has_loaded(pid: int, library: str) -> bool:
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:  # the process ended
        return False


def test_ctrl_c_while_the_command_imports_the_compiler(write_program):
    """Signalled as soon as numpy's core library is mapped: the compiler is being imported, the
    program file has not been read yet."""
    path = write_program("prog.py", PROGRAM)
    child = subprocess.Popen(
        [*command(), "check", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    loading = functools.partial(_has_loaded, child.pid, "_multiarray_umath")
    out, err = signal_when(child, loading, "numpy loading")
    assert (child.returncode, err) == (130, "interrupted\n")
    assert out == ""  # stopped before `check` said anything


GC_CALLBACK = """\
import gc
import os
import signal
import time

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf


def _interrupted_inside_a_collection(phase, info):
    # as Ctrl-C landing in jax's gc callback: the handler runs while the callback does
    if phase == "start":
        gc.callbacks.remove(_interrupted_inside_a_collection)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)


gc.callbacks.append(_interrupted_inside_a_collection)
gc.collect()


@func
def f(x: Tensor[(4,), "f32"]):
    return tf.exp(x)
"""


def test_ctrl_c_inside_a_gc_callback_still_stops_the_command(cli, write_program):
    done = cli("run", write_program("gc.py", GC_CALLBACK))
    assert (done.returncode, done.stderr) == (130, "interrupted\n")
    assert "agrees" not in done.stdout


@pytest.mark.parametrize(
    ("sig", "status", "line"),
    [(signal.SIGINT, 130, "interrupted\n"), (signal.SIGTERM, 143, "terminated\n")],
    ids=["SIGINT", "SIGTERM"],
)
def test_stopping_run_processes_leaves_nothing_behind(tmp_path, sig, status, line):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    argv = ["run", "examples/megatron_mlp.py", "--backend", "xla", "--devices", "8"]
    child = subprocess.Popen(
        [*command(), *argv, "--processes", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    workers = []
    try:
        while len(workers) < 2:  # "worker <i>: pid <pid>" once each worker is started
            announced = child.stderr.readline()
            assert announced, child.communicate()
            if announced.startswith("worker "):
                workers.append(int(announced.split()[-1]))
        time.sleep(1.0)  # the workers are importing jax or compiling
        child.send_signal(sig)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert (child.returncode, err) == (status, line)
    assert sorted(scratch.rglob("*")) == []  # no inputs, logs or scratch directories
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() for pid in workers):
        assert time.monotonic() < deadline, f"a worker outlived the command: {workers}"
        time.sleep(0.1)


HANGS_UP = PROGRAM + "\nimport os\nimport signal\n\nos.kill(os.getpid(), signal.SIGHUP)\n"


@pytest.mark.parametrize(("ignored", "status"), [(False, 129), (True, 0)])
def test_a_hangup_stops_the_command_unless_it_was_started_ignoring_it(
    write_program, ignored, status
):
    """SIGHUP stops the command like Ctrl-C (129, one line); under `nohup` (SIGHUP ignored from
    the start) it stays ignored and the command finishes."""
    path = write_program("hup.py", HANGS_UP)
    # the child inherits an ignored signal as ignored (and a handled one as the default)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN if ignored else signal.SIG_DFL)
    try:
        done = subprocess.run(
            [*command(), "check", path], capture_output=True, text=True, timeout=120
        )
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert done.returncode == status, done.stderr
    assert done.stderr == ("" if ignored else "hung up\n")
