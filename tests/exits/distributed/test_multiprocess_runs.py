"""The same sharded program across processes (issue 16, "Done when": the Megatron MLP and the TP
Llama layer run on 2 processes x 4 devices and on 4 processes x 2 devices, equal to the
single-process 8-device run: same module, same collectives, same numbers).

Each run goes through the command's own multi-process path (`cli.run_processes`, which launches
`cli.run_worker` under `launch_local`) into a kept work directory, so the test reads what every
process did: the module text it ran, the blocks it loaded (DESIGN §4.13 placement: process p
holds mesh partitions p*L .. (p+1)*L-1, so it loads only their blocks), the gathered results.
The baseline is run_xla(devices=8) in one fresh 8-device interpreter; the oracle is the
reference evaluator.
"""

import argparse
import json
import os
import re
import shutil
from importlib.util import find_spec

import numpy as np
import pytest

from exits.distributed import single_worker
from exits.distributed.programs import CASES, RUNS
from tilefoundry.cli import main
from tilefoundry.cli.run_processes import run_on_processes
from tilefoundry.evaluator import evaluate
from tilefoundry.evaluator.values import axis_indices
from tilefoundry.exits.stablehlo.spmd import lower_spmd

needs_jax = pytest.mark.skipif(
    find_spec("jax") is None, reason="multi-process runs need jax[lib]"
)  # found, not imported: this process never starts a jax backend

TIMEOUT_S = 240
COLLECTIVE = re.compile(
    r'"stablehlo\.(all_reduce|all_gather|all_to_all|reduce_scatter|'
    r'collective_permute|collective_broadcast)"'
)


@pytest.fixture(scope="module")
def baseline(devices8):
    """case name -> the single-process 8-device results (the session's 8-device worker)."""
    return {
        case.name: devices8.submit(
            single_worker.run_file, case.path, case.func, case.inputs(), 8
        ).result(timeout=TIMEOUT_S)
        for case in CASES
    }


def flat(value) -> list[np.ndarray]:
    return [a for v in value for a in flat(v)] if isinstance(value, tuple) else [value]


@pytest.mark.slow
@needs_jax
@pytest.mark.parametrize(("case", "split"), RUNS, ids=[f"{c.name}-{p}x{n}" for c, (p, n) in RUNS])
def test_the_program_runs_across_processes_like_on_one(case, split, baseline, tmp_path):
    processes, local = split
    fn, arrays = case.function(), case.inputs()
    devices = processes * local
    args = argparse.Namespace(file=case.path, func=case.func, timeout=TIMEOUT_S)
    timings = []
    got = run_on_processes(args, fn, arrays, devices, processes, {}, timings, workdir=tmp_path)

    # same module: the processes ran exactly the single-process SPMD text ...
    single = lower_spmd(fn)
    ran = (tmp_path / "module.mlir").read_text()
    assert ran == single.text
    # ... so the same collectives: the ones the single-process lowering recorded, in order
    assert COLLECTIVE.findall(ran) == [c.kind for c in single.collectives] != []
    # same numbers: the one-process run's up to the order in which an all-reduce adds its
    # addends (gloo's cross-process reduction orders them differently from the in-process one,
    # so the f32 results may differ in the last bits, normwise), and the oracle's
    want = flat(baseline[case.name])
    assert len(got) == len(want)
    for g, w, o in zip(got, want, flat(evaluate(fn, *arrays)), strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        scale = max(1.0, float(np.abs(w).max()))
        assert float(np.abs(g - w).max()) <= case.reordering * scale
        np.testing.assert_allclose(g, o, rtol=1e-4, atol=1e-4 * scale)

    # each process loaded only the blocks its own devices hold, and all blocks were loaded
    reports = [json.loads((tmp_path / f"process{p}.json").read_text()) for p in range(processes)]
    for p, report in enumerate(reports):
        owned = [  # DESIGN §4.13: process p runs the row-major partitions p*L .. (p+1)*L-1
            tuple(int(c) for c in np.unravel_index(d, _mesh_shape(fn)))
            for d in range(p * local, (p + 1) * local)
        ]
        assert {tuple(c) for shards in report["coords"] for c in shards} == set(owned)
        for param, index in report["loaded"]:
            type_, shape = fn.params[param].type, arrays[param].shape
            held = {_bounds(type_, shape, coord) for coord in owned}  # the oracle's blocks
            assert tuple(map(tuple, index)) in held, (p, param, index)
    for param, array in enumerate(arrays):
        loaded = {tuple(map(tuple, i)) for r in reports for q, i in r["loaded"] if q == param}
        covered = np.zeros(array.shape, bool)
        for index in loaded:
            covered[tuple(slice(a, b) for a, b in index)] = True
        assert covered.all(), f"parameter {param} was not fully loaded"


def _bounds(type_, shape, coord) -> tuple[tuple[int, int], ...]:
    """(start, stop) per axis of the block the reference evaluator gives device `coord`."""
    if not hasattr(type_.layout, "mesh"):
        return tuple((0, n) for n in shape)
    block = axis_indices(type_, shape, coord, "test")  # contiguous: canonical splits
    return tuple(
        (s.start or 0, n if s.stop is None else s.stop) for s, n in zip(block, shape, strict=True)
    )


def _mesh_shape(fn) -> tuple[int, ...]:
    for p in fn.params:
        layout = p.type.layout
        if hasattr(layout, "mesh"):
            return tuple(int(e) for e in layout.mesh.shape)
    raise AssertionError("no sharded parameter")


def test_the_command_refuses_a_process_count_the_mesh_cannot_divide(capsys):
    path = CASES[0].path
    assert main(["run", path, "--backend", "xla", "--processes", "3"]) == 1
    assert "8 devices, which do not divide over --processes 3" in capsys.readouterr().err
    assert main(["run", path, "--processes", "2"]) == 1
    assert "--processes runs the SPMD module on XLA; add --backend xla" in capsys.readouterr().err


@needs_jax
def test_the_command_stops_every_worker_when_the_run_times_out(capsys):
    path = CASES[0].path
    status = main(["run", path, "--backend", "xla", "--processes", "2", "--timeout", "0.5"])
    err = capsys.readouterr().err
    assert status == 1
    assert "the run did not finish within 0.5 s; stopped worker 0 (pid" in err
    logs = re.search(r"the logs are in (\S+)", err).group(1)  # kept for the user to read
    assert os.path.isfile(os.path.join(logs, "worker0.log"))
    shutil.rmtree(os.path.dirname(logs))
    pids = [int(pid) for pid in re.findall(r"worker \d: pid (\d+)", err)]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


HUGE_MESH = """
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

M = make_mesh((4096,), ("d",))


@func
def huge(x: Tensor[(4096 @ M.d,), "f32"]):
    return tf.reshard(x, layout=ShardLayout(Layout((4096,)), (B,), M), storage="gmem")
"""


def test_a_mesh_one_cpu_process_cannot_hold_is_refused_before_jax_starts(tmp_path, capsys):
    """Issue 16: a 4,096-device mesh used to fail inside XLA after a long start-up; XLA's CPU
    client numbers a process's devices process*2048 + i, so the command refuses it up front,
    with the counts and the process count that fits (the refusal precedes any worker or
    backend: nothing else in `run` has happened yet when it is raised)."""
    from tilefoundry.cli.program import load_program
    from tilefoundry.cli.run_processes import processes_for

    path = tmp_path / "huge.py"
    path.write_text(HUGE_MESH)
    assert main(["run", str(path), "--backend", "xla"]) == 1
    err = capsys.readouterr().err
    assert "its mesh needs 4096 devices, 4096 per process, but an XLA CPU process holds at" in err
    assert "most 2048; add --processes 2 (2048 devices each)" in err
    fn = load_program(str(path)).entry(None)
    args = argparse.Namespace(backend="xla", processes=2, timeout=300.0)
    assert processes_for(args, fn, 4096) == 2
