"""Who a process is and where the mesh lands (DESIGN §4.13: "across processes, the outermost mesh
axes cross process boundaries"), and the up-front refusals (issue 16: "meshes larger than the
devices available are refused up front with the counts"). No process is started here."""

import pytest

from exits.distributed.programs import CASES
from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.runtimes.distributed import (
    ProcessConfig,
    check_capacity,
    config_from_environment,
    crossing_axes,
    run_distributed,
)
from tilefoundry.exits.runtimes.distributed.config import first_host
from tilefoundry.exits.runtimes.distributed.placement import crosses_processes
from tilefoundry.ir.types.shard import make_mesh


def test_explicit_arguments_win_over_the_environment():
    env = {
        "TILEFOUNDRY_COORDINATOR_ADDRESS": "envhost:1",
        "TILEFOUNDRY_NUM_PROCESSES": "4",
        "TILEFOUNDRY_PROCESS_ID": "3",
        "SLURM_PROCID": "0",
    }
    assert config_from_environment(env) == ProcessConfig("envhost:1", 4, 3, None)
    assert config_from_environment(
        env, coordinator_address="h:2", num_processes=2, process_id=1, local_devices=4
    ) == ProcessConfig("h:2", 2, 1, 4)


def test_slurm_variables_place_the_coordinator_on_the_first_node():
    env = {
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_JOB_ID": "4097",
        "SLURM_JOB_NODELIST": "gpu[007-010,012],cpu1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
    }
    # jax's own SLURM rule: port 61000 + job id mod 4096
    assert config_from_environment(env) == ProcessConfig("gpu007:61001", 8, 5, 4)
    env["TILEFOUNDRY_COORDINATOR_PORT"] = "1234"
    env["SLURM_STEP_NODELIST"] = "n1,n2"
    assert config_from_environment(env).coordinator_address == "n1:1234"
    assert first_host("single") == "single"


def test_a_kubernetes_indexed_job_gives_the_process_id():
    env = {
        "JOB_COMPLETION_INDEX": "2",
        "TILEFOUNDRY_NUM_PROCESSES": "3",
        "TILEFOUNDRY_COORDINATOR_ADDRESS": "run-0.run:4000",
    }
    assert config_from_environment(env).process_id == 2


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({}, "set TILEFOUNDRY_COORDINATOR_ADDRESS, TILEFOUNDRY_NUM_PROCESSES, TILEFOUNDRY_PROC"),
        (
            {
                "TILEFOUNDRY_COORDINATOR_ADDRESS": "h:1",
                "TILEFOUNDRY_NUM_PROCESSES": "2",
                "TILEFOUNDRY_PROCESS_ID": "2",
            },
            r"process_id=2 is outside 0\.\.1",
        ),
        (
            {
                "TILEFOUNDRY_COORDINATOR_ADDRESS": "h",
                "TILEFOUNDRY_NUM_PROCESSES": "2",
                "TILEFOUNDRY_PROCESS_ID": "0",
            },
            "has no port; write it as host:port",
        ),
        ({"TILEFOUNDRY_NUM_PROCESSES": "two"}, "TILEFOUNDRY_NUM_PROCESSES='two' is not an int"),
    ],
)
def test_a_process_that_does_not_know_its_place_is_told_what_to_set(env, match):
    with pytest.raises(UnsupportedError, match=match):
        config_from_environment(env)


def test_the_outermost_mesh_axes_cross_processes():
    """Process p holds the row-major partitions p*L .. (p+1)*L-1 (DESIGN §4.13)."""
    mesh = make_mesh((2, 4), ("dp", "tp"))
    assert crossing_axes(mesh, 1) == ()
    assert crossing_axes(mesh, 2) == (0,)  # each process: one dp row, all of tp
    assert crossing_axes(mesh, 4) == (0, 1)  # each process: half a tp row
    assert crosses_processes(mesh, "tp", 2) is False
    assert crosses_processes(mesh, "dp", 2) is True
    assert crosses_processes(mesh, "dp,tp", 2) is True
    assert crossing_axes(make_mesh((8,), ("tp",)), 2) == (0,)


@pytest.mark.parametrize(
    ("processes", "local", "match"),
    [
        (2, 2, r"needs 8 devices but the run has 4 \(2 processes x 2 devices\)"),
        (4, 4, r"has 8 devices but the run has 16 \(4 processes x 4 devices\)"),
        (3, None, "8 devices, which do not divide over 3 processes"),
    ],
)
def test_a_mesh_the_run_cannot_hold_is_refused_with_the_counts(processes, local, match):
    with pytest.raises(UnsupportedError, match=match):
        check_capacity(make_mesh((2, 4)), processes, local)
    check_capacity(make_mesh((2, 4)), 2, 4)  # exactly full: accepted


def test_run_distributed_refuses_a_too_large_mesh_before_joining_the_run():
    """The coordinator address is unreachable: had the process tried to join, the error would
    be a join failure, not the count refusal."""
    case = CASES[0]
    config = ProcessConfig("unreachable.invalid:1", 2, 0, local_devices=2)
    with pytest.raises(UnsupportedError, match=r"needs 8 devices but the run has 4"):
        run_distributed(case.function(), lambda i, index: None, config=config)
