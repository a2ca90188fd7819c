"""One worker of `tilefoundry run --processes P` (started by `cli.run_processes`, one per process).

`python -m tilefoundry.cli.run_worker FILE WORKDIR [--func NAME] [--dim N=K ...]`: the launcher's
environment says which process this is (`exits.runtimes.distributed.config`). The worker parses the
same file, reads the global inputs the parent wrote to WORKDIR as memory-mapped .npy files, so its
loader touches only the blocks its devices hold, runs the SPMD module twice (compile + run, then
cached), and writes to WORKDIR: `process<p>.json` (the blocks it loaded, its timings) and, from
process 0, the gathered results `out<i>.npy` and the module text. A refusal prints the located
message and exits 1, like the command itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilefoundry.cli.run_worker")
    parser.add_argument("file")
    parser.add_argument("workdir")
    parser.add_argument("--func")
    parser.add_argument("--dim", action="append", default=[])
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)

    from tilefoundry.cli import user_error_text
    from tilefoundry.errors import EvalError, VerifyError

    try:
        return _work(args)
    except (VerifyError, EvalError) as err:
        print(user_error_text(err), file=sys.stderr)
        return 1


def _work(args: argparse.Namespace) -> int:
    from tilefoundry.cli.program import load_program
    from tilefoundry.exits.runtimes.distributed import config_from_environment, run_distributed
    from tilefoundry.ir.core.nested import flatten

    workdir = Path(args.workdir)
    config = config_from_environment()
    fn = load_program(args.file).entry(args.func)
    dims = {name: int(value) for name, _, value in (d.partition("=") for d in args.dim)}
    inputs = [np.load(workdir / f"in{i}.npy", mmap_mode="r") for i in range(len(fn.params))]
    loaded: list[list] = []

    def loader(param: int, index: tuple[slice, ...]) -> np.ndarray:
        loaded.append([param, [[s.start, s.stop] for s in index]])
        return np.ascontiguousarray(inputs[param][index])

    timings = []
    for label in ("compile + run", "cached run"):
        loaded.clear()  # both runs load the same blocks; report one
        start = time.perf_counter()
        result = run_distributed(
            fn, loader, config=config, dims=dims, gather=True, timeout_s=args.timeout
        )
        timings.append((label, time.perf_counter() - start))
    report = {
        "process_id": config.process_id,
        "loaded": loaded,
        "coords": [[list(s.coord) for s in shards] for shards in result.shards],
        "timings": timings,
    }
    if config.process_id == 0:
        for i, value in enumerate(flatten(result.value)):
            np.save(workdir / f"out{i}.npy", value)
        (workdir / "module.mlir").write_text(result.module.text, encoding="utf-8")
    (workdir / f"process{config.process_id}.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
