"""Writing a command's output file without ever losing the user's data.

An output is written to a temporary file in the same directory and renamed over the target only
when complete, so a failed write (disk full, file too large, interrupted) leaves the previous file
as it was and no truncated one behind. A path that is one of the command's inputs (the DSL file
itself, whichever way it is spelled) is refused before any work, as is a path whose directory is
missing or that names a directory: each is the user's mistake, reported as one error (exit 1).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from tilefoundry.errors import VerifyError


def check_output_path(output: str, inputs: list[str], flag: str = "-o") -> Path:
    """The output path, refused when writing it would destroy an input or cannot succeed."""
    path = Path(output)
    if path.is_dir():
        raise VerifyError(f"{flag} {output}: is a directory; give a file name inside it")
    parent = path.parent
    if not parent.is_dir():
        raise VerifyError(
            f"{flag} {output}: the directory {parent} does not exist; create it first"
        )
    for given in inputs:
        if _same_file(path, Path(given)):
            raise VerifyError(
                f"{flag} {output}: is the input file {given}; writing it would overwrite the "
                "program, so give another output path"
            )
    if not os.access(parent, os.W_OK):
        raise VerifyError(f"{flag} {output}: the directory {parent} is not writable")
    return path


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except OSError:
        return False


def write_atomically(path: Path, data: str | bytes) -> int:
    """Write `data` to `path` through a temporary file and a rename; returns the size written.
    The target keeps its permission bits when it exists (a new file gets the umask default)."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    mode = _mode_for(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if isinstance(err, OSError):
            reason = err.strerror or str(err)
            raise VerifyError(
                f"cannot write {path} ({reason}); the previous file, if any, is unchanged"
            ) from None
        raise
    return len(payload)


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
