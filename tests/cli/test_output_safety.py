"""No data loss from an output path (issue 20 "Data loss" and "What to build": "Atomic writes for
every output (temporary file in the same directory, then rename); refuse an output path that is
one of the inputs"; `-o` into a missing directory, onto a directory, an unwritable path or a full
disk is exit 1 with a clear message, never exit 2)."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import threading
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


# Issue 28 item 3: "write in place into anything that is not a regular file (device, FIFO, a
# symlink to one), atomically replace only regular files; every failed write exits 1 naming the
# path and the OS error; nothing is truncated or replaced".


def _identity(path: Path) -> tuple[int, int, int]:
    """What makes a special file the one it was: its inode, its type and its device number."""
    info = os.lstat(path)
    return info.st_ino, stat.S_IFMT(info.st_mode), info.st_rdev


@pytest.mark.parametrize("writer", ["emit", "report"])
def test_a_fifo_is_written_into_not_replaced(cli, write_program, tmp_path, writer):
    path = write_program("prog.py", PROGRAM)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    before = _identity(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = cli(writer, path, "-o", str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert _identity(fifo) == before
    marker = b"func.func" if writer == "emit" else b"<html"
    assert received and marker in received[0]


def test_a_symlink_to_a_regular_file_replaces_the_target_and_stays_a_link(
    cli, write_program, tmp_path
):
    path = write_program("prog.py", PROGRAM)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.mlir"
    target.write_text("stale", encoding="utf-8")
    link = tmp_path / "out.mlir"
    link.symlink_to(target)
    done = cli("emit", path, "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "func.func" in target.read_text(encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.mlir"]


def test_a_symlink_to_dev_null_stays_a_link_to_the_device(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    link = tmp_path / "sink"
    link.symlink_to("/dev/null")
    null_before = _identity(Path("/dev/null"))
    done = cli("emit", path, "-o", str(link))
    assert done.returncode == 0, done.stderr
    assert f"wrote {link}" in done.stdout
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert _identity(Path("/dev/null")) == null_before


def _full_device(tmp_path: Path) -> Path:
    """A private node of the full-disk device (`mknod c 1 7`) where this user may make one,
    else the system's /dev/full: every write to it fails with ENOSPC."""
    node = tmp_path / "full"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        return Path("/dev/full")
    return node


@pytest.mark.parametrize("writer", ["emit", "report"])
@pytest.mark.parametrize("through", ["device", "symlink"])
def test_a_full_device_exits_1_and_stays_the_device(cli, write_program, tmp_path, writer, through):
    path = write_program("prog.py", PROGRAM)
    device = _full_device(tmp_path)
    out = device
    if through == "symlink":
        out = tmp_path / "out.link"
        out.symlink_to(device)
    before = _identity(device)
    done = cli(writer, path, "-o", str(out))
    assert_refused(done, f"cannot write {out} (No space left on device)")
    assert _identity(device) == before
    assert os.major(before[2]) == 1 and os.minor(before[2]) == 7
    if through == "symlink":
        assert out.is_symlink() and os.readlink(out) == str(device)


def test_a_link_to_stdout_writes_the_descriptor_and_keeps_an_appended_log(write_program, tmp_path):
    """`-o` naming the command's own stdout (here through a private link to /proc/self/fd/1,
    which is what /dev/stdout is: a regression must not replace the machine's /dev/stdout) with
    stdout appended to a log: the artifact is appended to the log (the shell's meaning), the log
    is neither truncated nor replaced."""
    path = write_program("prog.py", PROGRAM)
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    log = tmp_path / "log.txt"
    log.write_text("earlier lines\n", encoding="utf-8")
    inode = log.stat().st_ino
    with open(log, "a", encoding="utf-8") as sink:
        done = subprocess.run(
            [*command(), "emit", path, "-o", str(stdout)],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    assert done.returncode == 0, done.stderr
    text = log.read_text(encoding="utf-8")
    assert text.startswith("earlier lines\nmodule @f")
    assert text.endswith(f"wrote {stdout} (222 bytes, @f)\n")
    assert log.stat().st_ino == inode
    assert stdout.is_symlink() and os.readlink(stdout) == "/proc/self/fd/1"


def test_a_read_only_file_is_refused_as_the_shell_refuses_it(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    out = tmp_path / "kept.mlir"
    out.write_text("protected", encoding="utf-8")
    out.chmod(0o444)
    done = cli("emit", path, "-o", str(out))
    assert_refused(done, f"-o {out}: is read-only (mode -r--r--r--)")
    assert out.read_text(encoding="utf-8") == "protected"
    assert out.stat().st_mode & 0o777 == 0o444


def test_the_longest_legal_file_name_is_written(cli, write_program, tmp_path):
    """A 255-byte name (NAME_MAX) failed because the temporary name was 14 bytes longer."""
    path = write_program("prog.py", PROGRAM)
    out = tmp_path / ("n" * 251 + ".txt")
    done = cli("emit", path, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "func.func" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, "prog.py"])


def test_a_name_past_name_max_or_a_path_past_path_max_names_the_os_error(
    cli, write_program, tmp_path
):
    path = write_program("prog.py", PROGRAM)
    too_long_name = tmp_path / ("n" * 256)
    assert_refused(cli("emit", path, "-o", str(too_long_name)), "(File name too long)")
    deep = tmp_path / "/".join(["d" * 200] * 21) / "out.mlir"  # about 4,300 bytes
    assert len(str(deep)) > 4096
    done = cli("emit", path, "-o", str(deep))
    assert_refused(done, "(File name too long)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.py"]


def test_proc_version_is_refused_and_unchanged(cli, write_program):
    path = write_program("prog.py", PROGRAM)
    before = Path("/proc/version").read_text()
    assert_refused(cli("emit", path, "-o", "/proc/version"), "-o /proc/version: is read-only")
    assert Path("/proc/version").read_text() == before


def test_a_writable_proc_file_is_refused_naming_it(cli, write_program):
    """A /proc file its owner may write (the command's own oom_score_adj: harmless whatever
    happens to it) takes no MLIR (EINVAL) and cannot be replaced (no file can be made in /proc):
    exit 1 naming the path, not an internal error."""
    path = write_program("prog.py", PROGRAM)
    out = "/proc/self/oom_score_adj"
    assert os.access(out, os.W_OK)
    assert_refused(cli("emit", path, "-o", out), f"-o {out}: ")


@pytest.fixture
def inode_starved_dir(tmp_path):
    """A tmpfs with no free inode, where this user may mount one: creating any file in it
    fails with ENOSPC although there is space."""
    mount = tmp_path / "starved"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=2", "tmpfs", str(mount)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs privileges this user lacks")
    try:
        (mount / "only").write_text("x")  # the root directory holds one inode, this the other
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_an_inode_exhausted_file_system_exits_1(cli, write_program, inode_starved_dir):
    path = write_program("prog.py", PROGRAM)
    out = inode_starved_dir / "out.mlir"
    assert_refused(cli("emit", path, "-o", str(out)), f"cannot write {out} (No space left")
    assert sorted(p.name for p in inode_starved_dir.iterdir()) == ["only"]


def test_an_escape_in_the_output_path_is_printed_escaped(cli, write_program, tmp_path):
    path = write_program("prog.py", PROGRAM)
    out = tmp_path / "a\x1b[31mred.mlir"
    done = cli("emit", path, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout
    assert "a\\x1b[31mred.mlir (222 bytes, @f)" in done.stdout
    assert "func.func" in out.read_text(encoding="utf-8")
