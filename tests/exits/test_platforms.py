# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The XLA exits follow the platform (issue 27 item 5): the `jax.export.Exported` that run_xla
calls declares the platform of jax's devices, or the platforms asked for, so the same module
lowers for `cuda` on a machine without a GPU (what a GPU machine compiles) and a module declared
for several platforms runs on each (`emit --portable --platform`: test_emit_platform.py)."""

import numpy as np
import pytest

pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")

import jax
from jax import export

from exits import platform_worker
from tilefoundry import Tensor, func
from tilefoundry.exits.runtimes.xla import compiled_text
from tilefoundry.exits.runtimes.xla_jit import exported_module, jax_function, numpy_caller
from tilefoundry.exits.stablehlo import emit_stablehlo


@func
def affine(x: Tensor[(4, 8), "f32"], w: Tensor[(8, 16), "f32"], b: Tensor[(16,), "f32"]):
    return x @ w + b


def _arrays():
    rng = np.random.default_rng(27)
    return [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16,))]


def _expected(x, w, b):
    return x.astype(np.float64) @ w + b


def test_the_module_declares_the_platform_jax_runs_on():
    exported = exported_module(emit_stablehlo(affine))
    assert exported.platforms == (export.default_export_platform(),)


def test_run_xlas_module_lowers_for_cuda():
    """Issue 27 done-when: run_xla's module, declared for cuda, lowers for cuda without a GPU."""
    text = compiled_text(affine, *_arrays())
    call = jax_function(text, platforms=("cuda",)).call
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _arrays()]
    lowered = call.trace(*structs).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.dot_general" in lowered
    with pytest.raises(ValueError, match=r"exported for platforms .*cuda.* used on .*cpu"):
        call(*_arrays())  # jax refuses to run a cuda module on this CPU: the declaration holds


def test_a_module_declared_for_several_platforms_runs_on_each_it_names():
    """The module takes jax's platform index first when it names several platforms; on the CPU
    it computes what numpy does, and it still lowers for cuda."""
    text = compiled_text(affine, *_arrays())
    both = jax_function(text, platforms=("cuda", "cpu"))
    np.testing.assert_allclose(numpy_caller(both)(*_arrays())[0], _expected(*_arrays()), rtol=1e-5)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _arrays()]
    assert "dot_general" in both.call.trace(*structs).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.slow
def test_the_spmd_module_lowers_for_cuda(devices8):
    """Issue 27 done-when: the SPMD exit's module, on 8 devices, lowers for cuda; its
    collectives and partitioning are there."""
    text = devices8.submit(platform_worker.spmd_lowered_for_cuda, "megatron_mlp").result()
    assert "mhlo.num_partitions = 8" in text
    assert "all_reduce" in text
