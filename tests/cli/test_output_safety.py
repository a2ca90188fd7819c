"""No data loss from an output path (issue 20 "Data loss" and "What to build": "Atomic writes for
every output (temporary file in the same directory, then rename); refuse an output path that is
one of the inputs"; `-o` into a missing directory, onto a directory, an unwritable path or a full
disk is exit 1 with a clear message, never exit 2)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from cli.conftest import REPO, command

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess

PROGRAM = """\
from tilefoundry import func, Tensor
from tilefoundry.dsl import tf

@func
def f(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:
    return tf.exp(x)
"""


def assert_refused(done, fragment: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert fragment in done.stderr, done.stderr


@pytest.mark.parametrize("writer", ["emit", "report"])
def test_the_output_cannot_be_the_program_itself(cli, write_program, tmp_path, writer):
    path = write_program("prog.py", PROGRAM)
    for spelling in (path, str(tmp_path / "." / "prog.py")):
        done = cli(writer, path, "-o", spelling)
        assert_refused(done, "is the input file")
        assert Path(path).read_text(encoding="utf-8") == PROGRAM


def test_the_output_cannot_be_a_link_to_the_program(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    link = tmp_path / "link.mlir"
    link.symlink_to(path)
    assert_refused(cli("emit", path, "-o", str(link)), "is the input file")
    assert Path(path).read_text(encoding="utf-8") == PROGRAM


@pytest.mark.parametrize("writer", ["emit", "report"])
def test_a_missing_directory_or_a_directory_is_refused(cli, write_program, tmp_path, writer):
    path = write_program("prog.py", PROGRAM)
    missing = tmp_path / "no" / "such" / "out.txt"
    assert_refused(cli(writer, path, "-o", str(missing)), "does not exist; create it first")
    assert_refused(cli(writer, path, "-o", str(tmp_path)), "is a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_directory_is_refused(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_refused(cli("emit", path, "-o", str(locked / "out.mlir")), "is not writable")


def _limit_file_size():
    """The child may write files of at most 64 bytes; an over-long write fails with EFBIG
    (SIGXFSZ ignored), which is how a full disk or a file-size quota looks to the writer."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


@pytest.mark.parametrize("writer", ["emit", "report"])
def test_a_failed_write_keeps_the_previous_file_and_leaves_no_partial_one(
    write_program, tmp_path, writer
):
    path = write_program("prog.py", PROGRAM)
    out = tmp_path / "out.txt"
    out.write_text("the previous good output\n", encoding="utf-8")
    done = subprocess.run(
        [*command(), writer, path, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        preexec_fn=_limit_file_size,
    )
    assert_refused(done, f"cannot write {out}")
    assert out.read_text(encoding="utf-8") == "the previous good output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt", "prog.py"]


def test_a_successful_write_replaces_the_file_and_keeps_its_mode(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    out = tmp_path / "out.mlir"
    out.write_text("old", encoding="utf-8")
    out.chmod(0o640)
    done = cli("emit", path, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "func.func" in out.read_text(encoding="utf-8")
    assert out.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.mlir", "prog.py"]
