"""Running SPMD modules on N XLA devices: place global arguments, execute, gather results.

Device `d` of the executable is partition `d` (device assignment `arange(N)`), which is the
row-major mesh coordinate the module's replica groups and `partition_id` arithmetic assume
(DESIGN §4.13). The module is called like the one-device exit, through a cached `jax.jit` of a
`jax.export.Exported` (`exits.runtimes.xla_jit`), here with `nr_devices=N` and jit in/out shardings
that are NamedShardings on a jax mesh of the same shape, names and device order as the module's
`sdy.mesh` (`partition_spec`, the placement the module's `sdy.sharding` attributes state). So
jit's C++ argument path cuts each global numpy argument into its blocks and places them, with no
per-call `jax.device_put` from Python, and each result comes back as a global jax array that
numpy gathers by the same sharding (a replicated result read from one device per block).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.runtimes.xla_jit import JaxFunction, jax_function, numpy_caller
from tilefoundry.exits.stablehlo.spmd.mesh import EXIT, axis_names
from tilefoundry.exits.stablehlo.spmd.module import SpmdModule, lower_spmd
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType


def _check_device_count(count: int) -> None:
    """Refuse, before the module is compiled, a device count this process does not hold:
    compiling a module for thousands of devices takes long only to fail inside XLA."""
    from jax.extend import backend

    from tilefoundry.exits.runtimes.distributed.placement import check_host_devices

    devices = backend.get_backend()
    if devices.platform == "cpu":
        check_host_devices(count, 1)
    available = len(devices.devices())
    if available < count:
        how = (
            "start the process with XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{count} (set before jax initialises its backend)"
            if devices.platform == "cpu"
            else f"run it on a machine with {count} {devices.platform} devices, or on several "
            "processes (run --processes)"
        )
        raise UnsupportedError(
            f"run_xla: the program's mesh needs {count} devices but XLA has {available} "
            f"({devices.platform}); {how}"
        )


def _compile(text: str, count: int):
    """The module compiled directly for `count` devices (device assignment `arange(count)`),
    without jit: what the tests compare run_xla's jit path against (same results, same
    collectives)."""
    from jax.extend import backend

    devices = backend.get_backend()  # the devices jax runs on (its default backend)
    available = devices.devices()
    options = backend.get_compile_options(
        num_replicas=1, num_partitions=count, device_assignment=np.arange(count).reshape(1, count)
    )
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = True
    return devices.compile_and_load(text, available[:count], options), available[:count]


def spmd_runner(
    fn: Function, devices: int, bindings: dict[str, int], *, flat: bool = True
) -> Callable[..., Any]:
    """`f(*global numpy arrays) -> flat list of global numpy results` for
    `run_xla(fn, *arrays, devices=N)` (see the module doc of `tilefoundry.exits.runtimes.xla`); with
    `flat=False` a single result comes back as the array itself (`xla_jit.numpy_caller`)."""
    return numpy_caller(spmd_function(fn, devices, bindings), flat=flat)


def spmd_function(
    fn: Function,
    devices: int,
    bindings: dict[str, int],
    *,
    donate_argnums: tuple[int, ...] = (),
    caller: str = "run_xla",
    platforms: Sequence[str] | None = None,
) -> JaxFunction:
    """The SPMD module of `fn` jitted for `devices` devices, compiled for the DimVar `bindings`
    of arguments already checked against the signature (`exits.runtimes.xla.check_inputs`: count,
    dtype, shape); the caller caches it per shapes. In a process that joined a multi-process run
    (`jax.distributed`), the devices are the run's global ones, placed as the distributed runtime
    places them (`placement.device_grid`: the outermost mesh axes cross processes). It declares
    the platform of jax's devices, or `platforms` (`xla_jit.exported_module`: a module to lower
    for another platform)."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    from tilefoundry.exits.runtimes.distributed.placement import check_host_devices

    processes = jax.process_count()
    if processes == 1 and jax.default_backend() == "cpu":
        check_host_devices(devices, 1)  # the count alone, before any module is built (issue 20)
    module = lower_spmd(fn, bindings=bindings or None)  # then the program's own refusals
    if processes == 1:
        _check_device_count(devices)
    count = prod(module.mesh.shape)
    if count != devices:
        raise UnsupportedError(
            f"{caller}: {fn.name} runs on a mesh of {count} devices "
            f"({module.mesh!r}), not devices={devices}"
        )
    if processes == 1:
        grid = np.array(jax.devices()[:count]).reshape(module.mesh.shape)
    else:
        from tilefoundry.exits.runtimes.distributed.placement import device_grid

        grid = device_grid(module.mesh, jax.devices(), processes)
    jax_mesh = Mesh(grid, axis_names(module.mesh))

    def placement(types: tuple[TensorType, ...]) -> tuple:
        return tuple(
            NamedSharding(jax_mesh, partition_spec(t, len(t.shape), module)) for t in types
        )

    return jax_function(
        module.text,
        in_shardings=placement(module.param_types),
        out_shardings=placement(module.result_types),
        num_devices=count,
        donate_argnums=donate_argnums,
        platforms=platforms,
    )


def partition_spec(type_: TensorType, rank: int, module: SpmdModule):
    """The jax placement of a parameter or result, on the module mesh (the common refinement of
    the program's meshes) whose shape and names the jax mesh has; the single-process and the
    multi-process runs both place values with it."""
    from jax.sharding import PartitionSpec

    names = axis_names(module.mesh)
    splits = module.views.splits(type_, "run_xla", EXIT)
    return PartitionSpec(
        *(tuple(names[m] for m in splits[axis]) if axis in splits else None for axis in range(rank))
    )
