"""`tilefoundry run --backend xla --devices N --processes P`: the same SPMD run across P processes.

The parent never initialises jax: it checks the request (in milliseconds, before anything
starts), writes the global inputs to a scratch directory, launches P workers
(`cli.run_worker`, N/P host devices each, a coordinator on a free localhost port) under
`exits.runtimes.distributed.launch_local` (a failed or killed worker, or a timeout, ends the run
with a message naming the worker; no worker outlives the command), and reads back the gathered
results, which `run` then judges against the oracle exactly as for one process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tilefoundry.cli.console import stdout_console
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir import Function


def processes_for(args: argparse.Namespace, fn: Function, devices: int | None) -> int | None:
    """The process count asked for, checked against the backend and the mesh; None for one."""
    processes = getattr(args, "processes", None)
    if args.backend == "xla" and devices and devices // (processes or 1) > 1:
        _check_host_devices(fn, devices, processes or 1)
    if processes is None or processes == 1:
        return None
    if processes < 1:
        raise VerifyError(f"Function {fn.name}: --processes {processes}; needs at least 1")
    if args.backend != "xla":
        raise VerifyError(
            f"Function {fn.name}: --processes runs the SPMD module on XLA; add --backend xla"
        )
    if devices is None:
        raise VerifyError(
            f"Function {fn.name}: --processes {processes} needs a sharded program; "
            f"{fn.name} has no device mesh"
        )
    if devices % processes:
        raise VerifyError(
            f"Function {fn.name}: its mesh has {devices} devices, which do not divide over "
            f"--processes {processes}; use a process count that divides {devices}"
        )
    return processes


def _check_host_devices(fn: Function, devices: int, processes: int) -> None:
    """The CPU client's per-process device limit (`placement.MAX_CPU_DEVICES_PER_PROCESS`),
    checked before jax starts: past it XLA fails only after a long start-up."""
    from tilefoundry.exits.runtimes.distributed.placement import (
        MAX_CPU_DEVICES_PER_PROCESS,
        fewest_cpu_processes,
    )

    if devices // processes <= MAX_CPU_DEVICES_PER_PROCESS:
        return
    fits = fewest_cpu_processes(devices, processes)
    raise VerifyError(
        f"Function {fn.name}: its mesh needs {devices} devices, {devices // processes} per "
        f"process, but an XLA CPU process holds at most {MAX_CPU_DEVICES_PER_PROCESS}; add "
        f"--processes {fits} ({devices // fits} devices each)"
    )


def run_on_processes(
    args: argparse.Namespace,
    fn: Function,
    arrays: list[np.ndarray],
    devices: int,
    processes: int,
    bound: dict[str, int],
    timings: list[tuple[str, float]],
    workdir: Path | None = None,
) -> list[np.ndarray]:
    """The gathered results of the run; `workdir` (default: a scratch directory removed
    afterwards) receives the inputs, the worker logs, the module text and each process's
    report (`cli.run_worker`)."""
    from tilefoundry.exits.runtimes.distributed import check_capacity, crossing_axes, launch_local
    from tilefoundry.exits.runtimes.distributed.placement import crosses_processes
    from tilefoundry.exits.stablehlo.spmd import lower_spmd

    module = lower_spmd(fn, bindings=bound or None)  # refuses what the SPMD exit cannot run
    check_capacity(module.mesh, processes, devices // processes)
    console = stdout_console()
    with _workdir(workdir) as work:
        for i, array in enumerate(arrays):
            np.save(work / f"in{i}.npy", np.asarray(array))
        argv = [sys.executable, "-m", "tilefoundry.cli.run_worker", args.file, str(work)]
        argv += ["--func", args.func] if args.func else []
        argv += [f"--dim={name}={value}" for name, value in bound.items()]
        argv += [f"--timeout={max(1, math.ceil(args.timeout))}"]
        # the logs outlive a failed run (its message points at them); a good run and an
        # interrupted one (Ctrl-C, SIGTERM) remove them
        logs = work / "logs" if workdir is not None else Path(tempfile.mkdtemp(prefix="tf-logs-"))
        start = time.perf_counter()
        try:
            launch = launch_local(
                argv,
                processes,
                devices_per_process=devices // processes,
                timeout_s=args.timeout,
                log_dir=logs,
                on_start=_announce,
            )
        except KeyboardInterrupt:
            if workdir is None:
                shutil.rmtree(logs, ignore_errors=True)
            raise
        if workdir is None:
            shutil.rmtree(logs, ignore_errors=True)
        timings.append((f"{processes} processes: launch to finish", time.perf_counter() - start))
        report = json.loads((work / "process0.json").read_text())
        for label, secs in report["timings"]:
            timings.append((f"xla, process 0: {label}", secs))
        results = [np.load(work / f"out{i}.npy") for i in range(len(module.result_types))]
    if launch.note:
        console.print(launch.note)
    names = ", ".join(module.mesh.names or ()) or "the mesh"
    crossing = crossing_axes(module.mesh, processes)
    console.print(
        f"{processes} processes x {devices // processes} devices, coordinator "
        f"localhost:{launch.port}; mesh axes crossing processes: "
        f"{', '.join(_axis(module.mesh, a) for a in crossing) or 'none'} (of {names})"
    )
    for c in module.collectives:
        over = (
            "crosses processes"
            if crosses_processes(module.mesh, c.mesh_axes, processes)
            else ("stays inside each process")
        )
        console.print(f"  {c.kind} over {c.mesh_axes} ({c.source}): {over}")
    return results


@contextlib.contextmanager
def _workdir(given: Path | None):
    if given is not None:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="tilefoundry-run-") as scratch:
        yield Path(scratch)


def _axis(mesh, index: int) -> str:
    return mesh.names[index] if mesh.names else f"a{index}"


def _announce(launch) -> None:
    """The worker pids, so a user (or a test) can watch or stop one."""
    for worker in launch.workers:
        print(f"worker {worker.process_id}: pid {worker.pid}", file=sys.stderr, flush=True)
