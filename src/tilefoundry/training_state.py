"""Checkpoints of a training state: save and restore, atomically, per process.

A training state is its arrays (parameters and optimizer state, by name), the step, the data
position and the data RNG's state: everything a resumed run needs to take the same next step as
an uninterrupted one, bit for bit.

Format: numpy's `.npz` (a zip of `.npy` arrays; numpy is already a dependency, every reader has
it, and it holds every dtype the runtimes return — bfloat16 and the fp8 kinds are stored as
their bits, their names in the metadata). safetensors would add a dependency for what npz does
here. One entry, `__checkpoint__`, is the metadata as a JSON string: the format version, the
step, the data position, the RNG state, and per array its name, dtype, global shape and the
blocks this file holds. In a run of P processes each process writes its own file,
`<path>.process<p>-of-<P>`, holding the blocks of its devices (`jax.Array.addressable_shards`,
each distinct block once); one process writes `<path>` itself.

Atomicity: each file is written through the CLI's output writer (`cli/output.write_output`: a
temporary file in the same directory, fsync, rename), so a save killed at any point leaves the
previous checkpoint as it was. A path that exists but is not a checkpoint is never overwritten.
Restoring a multi-process checkpoint checks that every process's file is of the same save (the
same step and save id), so a run stopped between two processes' renames is refused rather than
resumed from a mixture.
"""

from __future__ import annotations

import io
import json
import os
import uuid
import zipfile
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilefoundry.errors import EvalError, VerifyError

FORMAT = "tilefoundry-checkpoint"
VERSION = 1
METADATA = "__checkpoint__"
_WIDE = frozenset({"int64", "uint64", "float64", "complex128"})
"""Dtypes jax narrows unless x64 is on while they are placed."""


@dataclass(frozen=True)
class TrainingState:
    """What a checkpoint holds. `arrays` are numpy arrays or `jax.Array`s (on restore: numpy,
    or jax.Arrays placed with the shardings given)."""

    arrays: Mapping[str, Any]
    step: int
    data_position: int = 0
    rng: dict = field(default_factory=dict)
    """A numpy Generator's `bit_generator.state` (JSON-serialisable), or empty."""


def save(path: str | os.PathLike, state: TrainingState) -> Path:
    """Write `state` to `path` (this process's file of it); returns the file written. On
    several processes every process calls it, and it returns once every file is written."""
    process, processes = _process()
    target = _file(Path(path), process, processes)
    if target.exists() and not _is_checkpoint(target):
        raise VerifyError(
            f"checkpoint {target}: exists and is not a tilefoundry checkpoint; refusing to "
            "overwrite it, give another path"
        )
    if not target.parent.is_dir():
        raise VerifyError(f"checkpoint {target}: the directory {target.parent} does not exist")
    entries: dict[str, np.ndarray] = {}
    described = []
    for name, array in state.arrays.items():
        blocks = []
        for index, block in _blocks(array):
            key = f"a{len(entries)}"
            entries[key] = _bits(block)
            blocks.append({"key": key, "index": index})
        described.append(
            {"name": name, "dtype": str(array.dtype), "shape": list(array.shape), "blocks": blocks}
        )
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "save_id": _save_id(processes),
        "processes": processes,
        "step": int(state.step),
        "data_position": int(state.data_position),
        "rng": state.rng,
        "arrays": described,
    }
    buffer = io.BytesIO()
    np.savez(buffer, **{METADATA: np.array(json.dumps(metadata))}, **entries)
    from tilefoundry.cli.output import check_output_path, write_output

    write_output(check_output_path(str(target), [], flag="checkpoint"), buffer.getvalue())
    if processes > 1:  # the save is complete when every process's file is: return together
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"tilefoundry checkpoint {metadata['save_id']}")
    return target


def restore(path: str | os.PathLike, shardings: Mapping[str, Any] | None = None) -> TrainingState:
    """The state saved at `path`. Without `shardings` the arrays come back as global numpy
    arrays (one process); with them (name -> jax sharding, the step's `in_shardings`) as
    `jax.Array`s whose blocks each process reads from its own file."""
    process, processes = _process()
    target = _file(Path(path), process, processes)
    metadata, data = _read(target)
    if metadata["processes"] != processes:
        raise EvalError(
            f"checkpoint {target}: saved by {metadata['processes']} process(es), restored by "
            f"{processes}; restore it on the process count that saved it"
        )
    if processes > 1:
        _check_same_save(Path(path), processes, metadata)
    arrays = {}
    for entry in metadata["arrays"]:
        blocks = {
            _index_key(b["index"]): _from_bits(data[b["key"]], entry) for b in entry["blocks"]
        }
        if shardings is None:
            arrays[entry["name"]] = _assemble(entry, blocks, target)
        else:
            arrays[entry["name"]] = _place(entry, blocks, shardings[entry["name"]], target)
    return TrainingState(arrays, metadata["step"], metadata["data_position"], metadata["rng"])


def _process() -> tuple[int, int]:
    import sys

    if "jax" not in sys.modules:
        return 0, 1
    import jax

    return jax.process_index(), jax.process_count()


def _file(path: Path, process: int, processes: int) -> Path:
    if processes == 1:
        return path
    return path.with_name(f"{path.name}.process{process}-of-{processes}")


def _save_id(processes: int) -> str:
    """One id per save, the same on every process (process 0's, broadcast)."""
    if processes == 1:
        return uuid.uuid4().hex
    from jax.experimental import multihost_utils

    mine = np.frombuffer(uuid.uuid4().bytes, np.uint8)
    return bytes(np.asarray(multihost_utils.broadcast_one_to_all(mine))).hex()


def _blocks(array: Any):
    """(index, block) for each distinct block this process holds; the whole array for numpy."""
    shards = getattr(array, "addressable_shards", None)
    if shards is None:
        host = np.asarray(array)
        yield [[0, n] for n in host.shape], host
        return
    seen = set()
    for shard in shards:
        index = [list(s.indices(n))[:2] for s, n in zip(shard.index, array.shape, strict=True)]
        key = _index_key(index)
        if key not in seen:
            seen.add(key)
            yield index, np.asarray(shard.data)


def _index_key(index) -> tuple:
    return tuple((int(a), int(b)) for a, b in index)


def _bits(block: np.ndarray) -> np.ndarray:
    """A block as npz stores it: numpy's own dtypes as they are, ml_dtypes' as unsigned bits."""
    if block.dtype.kind == "V" or block.dtype.type.__module__.startswith("ml_dtypes"):
        return block.view(f"u{block.dtype.itemsize}")
    return block


def _from_bits(block: np.ndarray, entry: dict) -> np.ndarray:
    import ml_dtypes

    dtype = entry["dtype"]
    if str(block.dtype) == dtype:
        return block
    return block.view(np.dtype(getattr(ml_dtypes, dtype)))


def _is_checkpoint(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            if f"{METADATA}.npy" not in archive.namelist():
                return False
        return _read(path)[0].get("format") == FORMAT
    except (OSError, zipfile.BadZipFile, ValueError, KeyError, EvalError):
        return False


def _read(path: Path) -> tuple[dict, Any]:
    try:
        data = np.load(path, allow_pickle=False)
        metadata = json.loads(str(data[METADATA]))
    except FileNotFoundError:
        raise EvalError(f"checkpoint {path}: no such file") from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise EvalError(f"checkpoint {path}: not a tilefoundry checkpoint ({err})") from None
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise EvalError(
            f"checkpoint {path}: format {metadata.get('format')!r} version "
            f"{metadata.get('version')!r}; this tilefoundry reads {FORMAT!r} version {VERSION}"
        )
    return metadata, data


def _check_same_save(path: Path, processes: int, mine: dict) -> None:
    for other in range(processes):
        theirs, _ = _read(_file(path, other, processes))
        if (theirs["save_id"], theirs["step"]) != (mine["save_id"], mine["step"]):
            raise EvalError(
                f"checkpoint {path}: process {other}'s file is of step {theirs['step']}, this "
                f"process's of step {mine['step']} (a save stopped between two processes); "
                "restore an older complete checkpoint"
            )


def _assemble(entry: dict, blocks: dict, path: Path) -> np.ndarray:
    shape = tuple(entry["shape"])
    if len(blocks) == 1 and next(iter(blocks)) == tuple((0, n) for n in shape):
        return next(iter(blocks.values()))
    raise EvalError(
        f"checkpoint {path}: array '{entry['name']}' is stored in {len(blocks)} blocks; restore "
        "it with shardings= (the blocks are placed on the devices that saved them)"
    )


def _place(entry: dict, blocks: dict, sharding: Any, path: Path) -> Any:
    import jax

    shape = tuple(entry["shape"])
    whole = blocks.get(tuple((0, n) for n in shape))

    def block(index: tuple) -> np.ndarray:
        wanted = tuple(tuple(s.indices(n))[:2] for s, n in zip(index, shape, strict=True))
        if wanted in blocks:
            return blocks[wanted]
        if whole is not None:
            return whole[index]
        raise EvalError(
            f"checkpoint {path}: array '{entry['name']}' has no block {wanted} for this "
            "process's devices; restore it with the sharding it was saved with"
        )

    with jax.enable_x64(True) if entry["dtype"] in _WIDE else nullcontext():
        return jax.make_array_from_callback(shape, sharding, block)
