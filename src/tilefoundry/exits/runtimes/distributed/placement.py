"""Which global device runs which mesh coordinate, and which mesh axes cross processes.

DESIGN §4.13: mesh coordinate `c` is partition `d = row-major index of c`, and partition `d` runs
on the `d`-th global device ordered by (process index, device id). Process `p` therefore holds
partitions `p*L .. (p+1)*L - 1` (L devices per process): a contiguous row-major block, so the
innermost mesh axes stay inside one process (fast intra-host links) and the outermost ones cross
process boundaries. The replica groups the SPMD module writes use the same partition numbers, so
the module text does not depend on how many processes run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.runtimes.distributed.config import WHERE
from tilefoundry.exits.stablehlo.spmd.mesh import axis_names
from tilefoundry.ir.types.shard import Mesh

MAX_CPU_DEVICES_PER_PROCESS = 2048
"""XLA's CPU client numbers devices `process_index * 2048 + i`, so a process with more host
devices has ids that read as another process's ("Multiprocess computations aren't implemented
on the CPU backend", after a long start-up)."""


def fewest_cpu_processes(devices: int, at_least: int = 1) -> int:
    """The smallest process count (>= `at_least`) dividing `devices` whose processes each hold
    at most MAX_CPU_DEVICES_PER_PROCESS devices."""
    return next(
        p
        for p in range(max(1, at_least), devices + 1)
        if devices % p == 0 and devices // p <= MAX_CPU_DEVICES_PER_PROCESS
    )


def check_host_devices(devices: int, processes: int) -> None:
    """Refuse, in microseconds, a CPU run whose processes would each hold more devices than
    XLA's CPU client can number; the remedy names the fewest processes that fit."""
    per_process = devices // processes
    if per_process <= MAX_CPU_DEVICES_PER_PROCESS:
        return
    fits = fewest_cpu_processes(devices, processes)
    raise UnsupportedError(
        f"{WHERE}: the mesh needs {devices} devices, {per_process} in each of {processes} "
        f"process(es), but an XLA CPU process holds at most {MAX_CPU_DEVICES_PER_PROCESS}; run "
        f"it on {fits} processes ({devices // fits} devices each)"
    )


def check_capacity(mesh: Mesh, num_processes: int, local_devices: int | None) -> None:
    """Refuse a mesh the run cannot hold, with the counts, before anything starts.

    Each process must hold an equal, whole share of the mesh: the mesh size is
    `num_processes * local_devices` exactly (a larger mesh has coordinates with no device; a
    smaller one would leave devices, or whole processes, with nothing to run).
    """
    size = prod(int(e) for e in mesh.shape)
    if size % num_processes:
        raise UnsupportedError(
            f"{WHERE}: the mesh {mesh!r} has {size} devices, which do not divide over "
            f"{num_processes} processes; use a process count that divides {size}"
        )
    if local_devices is None:
        return
    available = num_processes * local_devices
    if size > available:
        raise UnsupportedError(
            f"{WHERE}: the mesh {mesh!r} needs {size} devices but the run has {available} "
            f"({num_processes} processes x {local_devices} devices); start more processes or "
            f"give each {size // num_processes} devices"
        )
    if size < available:
        raise UnsupportedError(
            f"{WHERE}: the mesh {mesh!r} has {size} devices but the run has {available} "
            f"({num_processes} processes x {local_devices} devices); every device must hold one "
            f"mesh coordinate, so give each process {size // num_processes} devices"
        )


def global_device_order(devices: Sequence[Any]) -> list[Any]:
    """Every device of the run, grouped by process: partition d runs on element d."""
    return sorted(devices, key=lambda d: (d.process_index, d.id))


def device_grid(mesh: Mesh, devices: Sequence[Any], num_processes: int) -> np.ndarray:
    """The global devices as an array of the mesh's shape (row-major, outermost axes across
    processes); refuses a run whose processes hold unequal device counts."""
    ordered = global_device_order(devices)
    per_process: dict[int, int] = {}
    for d in ordered:
        per_process[d.process_index] = per_process.get(d.process_index, 0) + 1
    counts = sorted(set(per_process.values()))
    if len(counts) != 1 or len(per_process) != num_processes:
        detail = ", ".join(f"process {p}: {n}" for p, n in sorted(per_process.items()))
        raise UnsupportedError(
            f"{WHERE}: the processes hold unequal device counts ({detail}); start every "
            "process with the same number of devices"
        )
    check_capacity(mesh, num_processes, counts[0])
    grid = np.empty(len(ordered), dtype=object)
    grid[:] = ordered
    return grid.reshape(tuple(int(e) for e in mesh.shape))


def crossing_axes(mesh: Mesh, num_processes: int) -> tuple[int, ...]:
    """The mesh axes along which some step moves to another process."""
    shape = tuple(int(e) for e in mesh.shape)
    owner = np.arange(prod(shape)).reshape(shape) // (prod(shape) // num_processes)
    return tuple(a for a in range(len(shape)) if np.any(np.diff(owner, axis=a) != 0))


def crosses_processes(mesh: Mesh, axes_label: str, num_processes: int) -> bool:
    """Whether a collective over the mesh axes named in `axes_label` ("x" or "x,y") moves data
    between processes (over the network on a cluster)."""
    names = axis_names(mesh)
    crossing = {names[a] for a in crossing_axes(mesh, num_processes)}
    return any(name in crossing for name in axes_label.split(","))
