"""Writing a command's output file (`-o`) without ever losing the user's data.

What a path names decides how it is written:

- a regular file (or a new name) is replaced atomically: the data goes to a short-named temporary
  file in the same directory, renamed over the target only when complete, so a failed write (disk
  full, file too large, interrupted) leaves the previous file as it was and no partial one behind;
- a symlink to a regular file replaces the link's target the same way (the link stays a link and
  reads the new content, as `>` through a link writes its target);
- anything else (a device such as /dev/null or /dev/full, a FIFO, a symlink to one) is written
  into in place, never replaced: renaming over a device node would destroy it;
- `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` name one of this process's descriptors, so the data
  goes to that descriptor, as the shell does (reopening a redirected stdout would truncate it).

Refused before any work, each as one error (exit 1): a path that is one of the command's inputs
(whichever way it is spelled), a directory, a missing directory, a directory that is not writable,
and a file without write permission: its owner made it read-only, which `-o` never overrides (not
even for root, whom `>` would let through). Every failed write names the path and the OS error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tilefoundry.errors import VerifyError

TEMP_PREFIX = ".tf"
"""The temporary file's name is this plus 8 random characters: short, so that any name the file
system accepts for the target is not refused because the temporary name is longer."""

_OWN_DESCRIPTOR = re.compile(r"/(?:proc/self|dev)/fd/(\d+)")
MAX_LINK_HOPS = 40
"""Linux's own limit on symlinks followed in one path lookup (ELOOP beyond it)."""


@dataclass(frozen=True)
class OutputTarget:
    """Where an output goes: `path` as given (for messages), `file` the file written or
    replaced, `descriptor` the open descriptor it names, `in_place` for a non-regular file."""

    path: Path
    file: Path
    in_place: bool = False
    descriptor: int | None = None


def check_output_path(output: str, inputs: list[str], flag: str = "-o") -> OutputTarget:
    """Where `output` writes, refused when writing it would destroy an input or cannot succeed."""
    path = Path(output)
    try:
        return _target(path, inputs, flag)
    except OSError as err:
        raise VerifyError(f"{flag} {path}: cannot write it ({_reason(err)})") from None


def _target(path: Path, inputs: list[str], flag: str) -> OutputTarget:
    for given in inputs:
        if _same_file(path, Path(given)):
            raise VerifyError(
                f"{flag} {path}: is the input file {given}; writing it would overwrite the "
                "program, so give another output path"
            )
    descriptor = _own_descriptor(path)
    if descriptor is not None:
        return OutputTarget(path, path, in_place=True, descriptor=descriptor)
    info = _stat(path)
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise VerifyError(f"{flag} {path}: is a directory; give a file name inside it")
    if info is not None and not stat.S_ISREG(info.st_mode):
        return OutputTarget(path, path, in_place=True)
    file = Path(os.path.realpath(path)) if path.is_symlink() else path
    parent = file.parent
    if not parent.is_dir():
        raise VerifyError(f"{flag} {path}: the directory {parent} does not exist; create it first")
    if info is not None and not info.st_mode & 0o222:
        raise VerifyError(
            f"{flag} {path}: is read-only (mode {stat.filemode(info.st_mode)}); its owner "
            "protected it, so give another path or make it writable first (chmod u+w)"
        )
    if info is not None and not os.access(file, os.W_OK):
        raise VerifyError(f"{flag} {path}: is not writable (permission denied)")
    if not os.access(parent, os.W_OK):
        raise VerifyError(f"{flag} {path}: the directory {parent} is not writable")
    return OutputTarget(path, file)


def _stat(path: Path) -> os.stat_result | None:
    """The target's status following links; None when nothing is there yet (a dangling link
    included: writing it creates the link's target, as `>` does)."""
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _own_descriptor(path: Path) -> int | None:
    """The descriptor of this process that `path` names through its chain of links
    (`/dev/stdout` -> `/proc/self/fd/1`), if it names one."""
    hop = os.path.abspath(path)
    for _ in range(MAX_LINK_HOPS):
        found = _OWN_DESCRIPTOR.fullmatch(hop)
        if found:
            return int(found.group(1))
        if not os.path.islink(hop):
            return None
        hop = os.path.join(os.path.dirname(hop), os.readlink(hop))
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except OSError:
        return False


def write_output(target: OutputTarget, data: str | bytes) -> int:
    """Write `data` where `target` says (see the module docstring); returns the size written."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        if target.descriptor is not None:
            _write_all(target.descriptor, payload)
        elif target.in_place:
            _write_in_place(target.file, payload)
        else:
            _replace(target.file, payload)
    except OSError as err:
        kept = "" if target.in_place else "; the previous file, if any, is unchanged"
        raise VerifyError(f"cannot write {target.path} ({_reason(err)}){kept}") from None
    return len(payload)


def _write_in_place(file: Path, payload: bytes) -> None:
    fd = os.open(file, os.O_WRONLY)
    try:
        _write_all(fd, payload)
    finally:
        os.close(fd)


def _replace(file: Path, payload: bytes) -> None:
    """Temporary file + rename; the target keeps its permission bits when it exists (a new file
    gets the umask default)."""
    mode = _mode_for(file)
    fd, temp = tempfile.mkstemp(dir=file.parent, prefix=TEMP_PREFIX)
    try:
        try:
            _write_all(fd, payload)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(temp, mode)
        os.replace(temp, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        if written == 0:  # a device that takes nothing more: report it as the disk-full case
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
