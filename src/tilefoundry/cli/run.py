"""`tilefoundry run`: execute a program on a backend and judge it against the reference oracle.

The oracle is always the reference evaluator on the program as written. The reference backend
runs the *compiled* (fused) program, so a run checks that fusion changed nothing; the xla backend
runs the StableHLO exit, so a run checks the lowering. A disagreement is our bug (exit 2), except
the documented one: results that equal the oracle's once subnormal inputs are read as zero are
XLA's CPU runtime flushing them (docs/numerics.md), reported as such (exit 0).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from rich.table import Table

from tilefoundry.cli import Disagreement
from tilefoundry.cli.commands import compile_fn, entry_of
from tilefoundry.cli.console import plain, progress, stdout_console
from tilefoundry.cli.judge import float64_chunks, flush_subnormals, judge
from tilefoundry.cli.program import (
    bind_dims,
    dim_options,
    dim_vars,
    load_inputs,
    random_inputs,
)
from tilefoundry.cli.run_processes import processes_for, run_on_processes
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core.nested import flatten
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.facts import device_count
from tilefoundry.ir.hir.footprint import check_memory


def flat_outputs(value) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in flatten(value)]


def _timed(label: str, timings: list[tuple[str, float]], action):
    with progress(label):
        start = time.perf_counter()
        value = action()
        timings.append((label, time.perf_counter() - start))
    return value


def _devices_for(fn: Function, requested: int | None, backend: str) -> int | None:
    mesh = device_count(fn)
    if requested is None:
        return mesh
    if mesh is None and requested != 1:
        raise VerifyError(
            f"Function {fn.name}: --devices {requested} needs a sharded program; "
            f"{fn.name} has no device mesh"
        )
    if mesh is not None and requested != mesh:
        raise VerifyError(
            f"Function {fn.name}: its mesh has {mesh} devices; --devices {requested} does not "
            f"match ({backend} runs one shard per mesh device)"
        )
    return requested


def prepare_host_devices(count: int) -> None:
    """XLA's CPU client fixes its device count when jax first loads; ask for enough."""
    if count <= 1 or "jax" in sys.modules:
        return
    flag = f"--xla_force_host_platform_device_count={count}"
    current = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in current:
        os.environ["XLA_FLAGS"] = f"{current} {flag}".strip()


def run(args: argparse.Namespace) -> int:
    from tilefoundry.evaluator import evaluate

    timings: list[tuple[str, float]] = []
    start = time.perf_counter()
    program, fn = entry_of(args)
    timings.append(("parse + typeinfer", time.perf_counter() - start))
    if args.gpu_backend is not None and args.backend != "pallas":
        raise VerifyError(
            "--gpu-backend chooses the Pallas kernel's lowering; add --backend pallas"
        )
    devices = _devices_for(fn, args.devices, args.backend)
    processes = processes_for(args, fn, devices)
    rng = np.random.default_rng(args.seed)
    bound = bind_dims(fn, dim_options(args.dim), rng)
    check_memory(fn, bound, "run")  # before any input is drawn
    if args.device_memory is not None:
        from tilefoundry.ir.hir.device_memory import check_device_memory

        check_device_memory(fn, bound, args.device_memory, "run")
    arrays = load_inputs(fn, args.inputs) if args.inputs else random_inputs(fn, bound, rng)

    oracle = flat_outputs(
        _timed("reference oracle (as written)", timings, lambda: evaluate(fn, *arrays))
    )
    fused_note = ""
    if args.backend == "reference":
        if dim_vars(fn):
            results = oracle
            fused_note = "fusion skipped: DimVar shapes (the tensor tier needs static shapes)"
        else:
            fused, report = _timed("compile (legalize, fuse)", timings, lambda: compile_fn(fn))
            results = flat_outputs(
                _timed("reference (fused)", timings, lambda: evaluate(fused, *arrays))
            )
            fused_note = str(report).splitlines()[0]
    elif processes:
        results = run_on_processes(args, fn, arrays, devices, processes, bound, timings)
    elif args.backend == "pallas":
        from tilefoundry.exits.pallas import run_pallas

        results = flat_outputs(
            _timed(
                "pallas: build + run",
                timings,
                lambda: run_pallas(fn, *arrays, gpu_backend=args.gpu_backend),
            )
        )
    else:
        from tilefoundry.exits.runtimes.xla import run_xla

        prepare_host_devices(devices or 1)
        label = f"xla ({devices} devices)" if devices and devices > 1 else "xla"
        results = flat_outputs(
            _timed(
                f"{label}: compile + run", timings, lambda: run_xla(fn, *arrays, devices=devices)
            )
        )
        _timed(f"{label}: cached run", timings, lambda: run_xla(fn, *arrays, devices=devices))

    judged = judge(results, oracle, rtol=args.rtol, atol=args.atol)
    flushed_note = ""
    if not judged.ok and args.backend != "reference":
        flushed_note = _agrees_with_subnormals_flushed(args, fn, arrays, results, judged, timings)
    _print_run(args, program.path, fn, bound, devices, arrays, results, judged, fused_note, timings)
    if flushed_note:
        stdout_console().print(flushed_note)
    if not judged.ok and not flushed_note:
        raise Disagreement(
            f"{args.backend} results disagree with the reference oracle "
            f"(max |diff| {judged.max_abs_diff:.3g})\n{judged.summary()}"
        )
    return 0


def _agrees_with_subnormals_flushed(args, fn, arrays, results, judged, timings) -> str:
    """The note that the backend's results are the oracle's on the inputs with their subnormals
    read as zero (XLA's CPU runtime, docs/numerics.md), or "" when they are not (or no input
    holds a subnormal)."""
    from tilefoundry.evaluator import evaluate

    flushed = flush_subnormals(arrays)
    if flushed is None:
        return ""
    oracle = flat_outputs(
        _timed("reference oracle (subnormals flushed)", timings, lambda: evaluate(fn, *flushed))
    )
    if not judge(results, oracle, rtol=args.rtol, atol=args.atol).ok:
        return ""
    return (
        f"the {judged.mismatches} differing element(s) are the flushed-subnormal difference, not "
        f"a wrong result: {args.backend} reads subnormal inputs as zero, as XLA's CPU runtime "
        "does (docs/numerics.md), and on the inputs with their subnormals flushed the oracle "
        "agrees"
    )


def _summary_table(title: str, names: list[str], arrays: list[np.ndarray]) -> Table:
    table = Table(title=title, title_justify="left")
    for header in ("name", "shape", "dtype", "mean", "std", "min", "max"):
        table.add_column(header, justify="left" if header in ("name", "dtype") else "right")
    for name, array in zip(names, arrays, strict=True):
        stats = _statistics(array) if array.size else (0.0, 0.0, 0.0, 0.0)
        table.add_row(name, str(tuple(array.shape)), str(array.dtype), *(f"{v:.4g}" for v in stats))
    return table


def _statistics(array: np.ndarray) -> tuple[float, float, float, float]:
    """Mean, standard deviation, min and max in float64, a block at a time (NaN propagates)."""
    total, low, high = 0.0, np.inf, -np.inf
    for _, block in float64_chunks(array):
        total += float(block.sum())
        low, high = np.minimum(low, block.min()), np.maximum(high, block.max())
    mean = total / array.size
    spread = sum(float(np.square(block - mean).sum()) for _, block in float64_chunks(array))
    return mean, float(np.sqrt(spread / array.size)), float(low), float(high)


def _pallas_mode(gpu_backend: str | None) -> str:
    from tilefoundry.exits.pallas.gpu import gpu_backend as resolve
    from tilefoundry.exits.pallas.run import default_interpret

    label = resolve(gpu_backend).label
    if default_interpret():
        return f"interpret mode, {label}'s constraints checked" if gpu_backend else "interpret mode"
    return f"compiled by {label}"


def _print_run(args, path, fn, bound, devices, arrays, results, judged, fused_note, timings):
    console = stdout_console()
    where = f"{args.backend}" + (f" on {devices} devices" if devices else "")
    if args.backend == "pallas":
        where += f" ({_pallas_mode(args.gpu_backend)})"
    console.print(f"run @{plain(fn.name)} from {plain(path)} on {where} (seed {args.seed})")
    if bound:
        picked = ", ".join(f"{k}={v}" for k, v in bound.items())
        console.print(f"DimVars: {plain(picked)}" + ("" if args.dim else " (drawn from the seed)"))
    source = "from --inputs" if args.inputs else "random from the parameter types"
    console.print(_summary_table(f"inputs ({source})", [p.name for p in fn.params], arrays))
    names = [f"out{i}" for i in range(len(results))] if len(results) > 1 else ["out"]
    console.print(_summary_table("results", names, results))
    if fused_note:
        console.print(fused_note)
    verdict = "agrees" if judged.ok else "DISAGREES"
    oracle = "the reference evaluator on the program as written"
    console.print(f"oracle ({oracle}): {verdict}, max |diff| = {judged.max_abs_diff:.3g}")
    console.print("timings:")
    for label, secs in timings:
        console.print(f"  {label:<36} {secs * 1e3:9.1f} ms")
