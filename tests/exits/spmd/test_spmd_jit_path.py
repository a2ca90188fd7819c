"""run_xla(..., devices=8) through jit's C++ argument path (exits/runtimes/xla_spmd.py): a cached
`jax.jit` of a `jax.export.Exported` with `nr_devices=8` and NamedSharding in/out shardings.

Issue 19: "run_xla through jit's C++ argument path ... one and many devices, guarded by a test
that fails loudly if the pinned jax's internals change". These tests pin what the jit path must
keep: every result bit-identical to the module executed directly (arguments placed one by one,
blocks gathered by the module's own geometry, as the exit did before), and the executable jit
builds holding exactly the collectives of the directly compiled one (jit adds no resharding
around our manually partitioned module). They run in the 8-device worker of tests/conftest.py.
"""

import numpy as np
import pytest

from exits.spmd import jit_path_worker
from exits.spmd.sharded_programs import PROGRAMS

pytest.importorskip("jax", reason="the SPMD exit tests need jax[lib]")

TIMEOUT_S = 180
# One mesh and a 2x4 one, a replicated and split results, a tuple return, two mesh views, a loop.
NAMES = ("megatron_mlp", "gather_2d", "split_swap", "split_reductions", "two_views",
         "looped_megatron")  # fmt: skip


def inputs(name: str) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(sum(map(ord, name)) + 1)
    return tuple(
        rng.standard_normal(tuple(int(d) for d in p.type.shape)).astype(np.float32)
        for p in PROGRAMS[name].sharded.params
    )


@pytest.mark.parametrize("name", NAMES)
def test_jit_path_results_are_bit_identical_to_the_direct_executable(name, devices8):
    arrays = inputs(name)
    want = devices8.submit(jit_path_worker.direct_run, name, arrays).result(timeout=TIMEOUT_S)
    got = devices8.submit(jit_path_worker.run_xla_flat, name, arrays).result(timeout=TIMEOUT_S)
    again = devices8.submit(jit_path_worker.run_xla_flat, name, arrays).result(timeout=TIMEOUT_S)
    assert len(got) == len(want) == len(again)
    for g, a, w in zip(got, again, want, strict=True):
        assert not np.isnan(w).any()  # every block of the direct result was written
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(a, w)  # the cached second call too


@pytest.mark.parametrize("name", ("megatron_mlp", "gather_2d", "split_swap", "two_views"))
def test_jit_adds_no_collective_to_our_module(name, devices8):
    direct, jitted = devices8.submit(jit_path_worker.collectives, name, inputs(name)).result(
        timeout=TIMEOUT_S
    )
    assert direct, f"{name} is expected to communicate"
    assert sorted(jitted) == sorted(direct)


def test_the_exported_module_is_declared_for_eight_devices(devices8):
    count, shapes = devices8.submit(jit_path_worker.exported_devices, "megatron_mlp").result(
        timeout=TIMEOUT_S
    )
    assert count == 8
    assert shapes == [tuple(int(d) for d in p.type.shape) for p in
                      PROGRAMS["megatron_mlp"].sharded.params]  # fmt: skip
