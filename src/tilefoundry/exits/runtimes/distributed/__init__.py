"""The SPMD exit across processes and hosts (`jax.distributed`): one program, many processes.

The module every process runs is the single-process SPMD module (`exits.stablehlo.spmd.lower_spmd`);
only where its partitions run changes. `config` says who this process is (arguments, our environment
variables, SLURM, Kubernetes indexed jobs); `placement` maps the mesh onto the global devices so
the outermost mesh axes cross processes and refuses a mesh the run cannot hold before anything
starts; `runtime` joins the run, feeds each process only its own blocks and returns its blocks or
the gathered value; `launch` starts and supervises P workers on one machine (the CLI's
`--processes`, and the test recipe). See docs/distributed.md.
"""

from tilefoundry.exits.runtimes.distributed.config import ProcessConfig, config_from_environment
from tilefoundry.exits.runtimes.distributed.launch import (
    CoordinatorPortInUse,
    LocalLaunch,
    WorkerFailed,
    launch_local,
)
from tilefoundry.exits.runtimes.distributed.placement import check_capacity, crossing_axes
from tilefoundry.exits.runtimes.distributed.runtime import (
    DistributedResult,
    LocalShard,
    initialize,
    run_distributed,
)

__all__ = [
    "CoordinatorPortInUse",
    "DistributedResult",
    "LocalLaunch",
    "LocalShard",
    "ProcessConfig",
    "WorkerFailed",
    "check_capacity",
    "config_from_environment",
    "crossing_axes",
    "initialize",
    "launch_local",
    "run_distributed",
]
