"""Who this process is in a multi-process run: coordinator address, process count and id.

A cluster launcher tells each process its place through the environment, so the same program
runs unchanged under SLURM, plain SSH and a Kubernetes indexed job. Explicit arguments win, then
our own variables, then the scheduler's:

- `TILEFOUNDRY_COORDINATOR_ADDRESS` (`host:port` of process 0), `TILEFOUNDRY_NUM_PROCESSES`,
  `TILEFOUNDRY_PROCESS_ID`, and optionally `TILEFOUNDRY_LOCAL_DEVICES` (devices per process,
  which lets a too-large mesh be refused before anything starts);
- SLURM (`srun`): `SLURM_PROCID`, `SLURM_NTASKS`, the coordinator on the first host of
  `SLURM_STEP_NODELIST` / `SLURM_JOB_NODELIST` at port `TILEFOUNDRY_COORDINATOR_PORT`, else
  61000 + job id mod 4096 (jax's own rule, so two jobs sharing a node pick different ports);
- Kubernetes indexed jobs: `JOB_COMPLETION_INDEX` is the process id.

Nothing here imports jax: reading the environment and refusing a bad one take microseconds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tilefoundry.errors import UnsupportedError

WHERE = "tilefoundry.exits.runtimes.distributed"
ADDRESS = "TILEFOUNDRY_COORDINATOR_ADDRESS"
PROCESSES = "TILEFOUNDRY_NUM_PROCESSES"
PROCESS_ID = "TILEFOUNDRY_PROCESS_ID"
LOCAL_DEVICES = "TILEFOUNDRY_LOCAL_DEVICES"
PORT = "TILEFOUNDRY_COORDINATOR_PORT"
HOST_DEVICE_FLAG = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


@dataclass(frozen=True)
class ProcessConfig:
    """One process's place in the run. `local_devices` is None when only the runtime knows it
    (GPUs); on CPU it is the XLA_FLAGS host device count."""

    coordinator_address: str
    num_processes: int
    process_id: int
    local_devices: int | None = None

    def __post_init__(self):
        if ":" not in self.coordinator_address:
            raise UnsupportedError(
                f"{WHERE}: coordinator address {self.coordinator_address!r} has no port; "
                "write it as host:port (process 0 listens there)"
            )
        if self.num_processes < 1:
            raise UnsupportedError(f"{WHERE}: num_processes={self.num_processes}; needs >= 1")
        if not 0 <= self.process_id < self.num_processes:
            raise UnsupportedError(
                f"{WHERE}: process_id={self.process_id} is outside 0..{self.num_processes - 1}; "
                "each process needs a distinct id below the process count"
            )
        if self.local_devices is not None and self.local_devices < 1:
            raise UnsupportedError(f"{WHERE}: local_devices={self.local_devices}; needs >= 1")

    @property
    def total_devices(self) -> int | None:
        """Every device of the run, when each process's count is known up front."""
        return None if self.local_devices is None else self.local_devices * self.num_processes


def config_from_environment(
    env: Mapping[str, str] | None = None,
    *,
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_devices: int | None = None,
) -> ProcessConfig:
    """The ProcessConfig that the arguments and the environment `env` (default os.environ) give;
    anything missing is refused with the variable to set."""
    env = os.environ if env is None else env
    address = coordinator_address or env.get(ADDRESS) or _slurm_address(env)
    count = num_processes if num_processes is not None else _int(env, PROCESSES, "SLURM_NTASKS")
    index = (
        process_id
        if process_id is not None
        else _int(env, PROCESS_ID, "SLURM_PROCID", "JOB_COMPLETION_INDEX")
    )
    missing = [
        name
        for name, value in ((ADDRESS, address), (PROCESSES, count), (PROCESS_ID, index))
        if value is None
    ]
    if missing:
        raise UnsupportedError(
            f"{WHERE}: this process does not know its place in the run; set {', '.join(missing)} "
            "(or pass them as arguments; under SLURM srun sets them)"
        )
    if local_devices is None:
        local_devices = _int(env, LOCAL_DEVICES) or _host_device_count(env)
    return ProcessConfig(address, count, index, local_devices)


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        text = env.get(name)
        if text is None or text == "":
            continue
        try:
            return int(text)
        except ValueError:
            raise UnsupportedError(f"{WHERE}: {name}={text!r} is not an integer") from None
    return None


def _host_device_count(env: Mapping[str, str]) -> int | None:
    """On CPU the device count is whatever XLA_FLAGS asks for (1 when it asks nothing); on an
    accelerator only the runtime knows, so None."""
    platforms = env.get("JAX_PLATFORMS", "")
    found = HOST_DEVICE_FLAG.search(env.get("XLA_FLAGS", ""))
    if found:
        return int(found.group(1))
    return 1 if platforms == "cpu" else None


def _slurm_address(env: Mapping[str, str]) -> str | None:
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodes:
        return None
    port = env.get(PORT)
    if port is None:
        port = str(61000 + int(env.get("SLURM_JOB_ID", "0") or 0) % 4096)
    return f"{first_host(nodes)}:{port}"


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: `node[07-09,12],gpu1` gives `node07` (zero padding
    kept, as SLURM writes host names)."""
    head = re.match(r"([^,\[]*)(?:\[([^\]]*)\])?", nodelist.strip())
    prefix, ranges = head.group(1), head.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]
