"""Running SPMD modules on N XLA devices: place global arguments, execute, gather results.

Device `d` of the executable is partition `d` (device assignment `arange(N)`), which is the
row-major mesh coordinate the module's replica groups and `partition_id` arithmetic assume
(DESIGN §4.13). Arguments are placed through a jax mesh of the same shape, names and device
order; results are gathered back with numpy by the block geometry the module itself uses
(`visitor_registry.shard_reading.canonical_splits`), so a replicated result is read from one
device per block.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product as cartesian
from math import prod
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.spmd.mesh import EXIT, axis_names, device_id
from tilefoundry.exits.spmd.module import SpmdModule, lower_spmd
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, resolve_dim
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.visitor_registry.shard_reading import canonical_splits

_EXECUTABLES: dict[tuple, tuple[Function, SpmdModule, Any]] = {}


def _block(type_: TensorType, shape: tuple[int, ...], device: int) -> tuple:
    """The global index of the block device `device` holds (its coordinate on the value's own
    mesh: every mesh of the program is a row-major view of the same device ids)."""
    splits = canonical_splits(type_, "run_xla", EXIT)
    index = [slice(None)] * len(shape)
    if not splits:
        return tuple(index)
    mesh = type_.layout.mesh
    coord = [
        (device // stride) % extent
        for stride, extent in zip(c_order_strides(mesh.shape), mesh.shape, strict=True)
    ]
    for axis, mesh_axes in splits.items():
        size = shape[axis] // prod(mesh.shape[m] for m in mesh_axes)
        block = 0
        for m in mesh_axes:
            block = block * mesh.shape[m] + coord[m]
        index[axis] = slice(block * size, (block + 1) * size)
    return tuple(index)


def _check_device_count(count: int) -> None:
    """Refuse, before the module is built, a device count this process cannot hold: building
    and compiling a module for thousands of devices takes long only to fail inside XLA."""
    from jax.extend import backend

    from tilefoundry.exits.distributed.placement import check_host_devices

    check_host_devices(count, 1)
    available = len(backend.get_backend("cpu").devices())
    if available < count:
        raise UnsupportedError(
            f"run_xla: the program's mesh needs {count} devices but XLA has {available}; "
            f"on CPU start the process with XLA_FLAGS=--xla_force_host_platform_device_count="
            f"{count} (set before jax initialises its backend)"
        )


def _compile(text: str, count: int):
    from jax.extend import backend

    cpu = backend.get_backend("cpu")
    available = cpu.devices()
    options = backend.get_compile_options(
        num_replicas=1, num_partitions=count, device_assignment=np.arange(count).reshape(1, count)
    )
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = True
    return cpu.compile_and_load(text, available[:count], options), available[:count]


def run_spmd(
    fn: Function,
    arrays: tuple[np.ndarray, ...],
    devices: int,
    bind_dims: Callable[[Function, tuple], dict[str, int]],
) -> Any:
    """`run_xla(fn, *arrays, devices=N)`: see the module doc of `tilefoundry.exits.xla`. The
    arguments arrive checked against the signature (`exits.xla.check_inputs`: count, dtype,
    shape), so nothing here re-checks them."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    from tilefoundry.exits.xla import structure

    bindings = bind_dims(fn, arrays)
    key = (id(fn), devices, tuple((a.shape, a.dtype.str) for a in arrays))
    entry = _EXECUTABLES.get(key)
    if entry is None:
        _check_device_count(devices)
        module = lower_spmd(fn, bindings=bindings or None)
        count = prod(module.mesh.shape)
        if count != devices:
            raise UnsupportedError(
                f"run_xla: {fn.name} runs on a mesh of {count} devices "
                f"({module.mesh!r}), not devices={devices}"
            )
        executable, placed_on = _compile(module.text, count)
        entry = _EXECUTABLES[key] = (fn, module, (executable, placed_on))
    _, module, (executable, placed_on) = entry
    mesh = module.mesh
    jax_mesh = Mesh(np.array(placed_on).reshape(mesh.shape), axis_names(mesh))
    inputs = []
    with jax.enable_x64(True):  # else device_put silently narrows 64-bit inputs to 32 bits
        for array, type_ in zip(arrays, module.param_types, strict=True):
            sharding = NamedSharding(jax_mesh, partition_spec(type_, array.ndim, module))
            inputs.append(jax.device_put(array, sharding))
        outputs = executable.execute_sharded(inputs).disassemble_into_single_device_arrays()
    coords = list(cartesian(*(range(e) for e in mesh.shape)))
    results = []
    for per_device, type_ in zip(outputs, module.result_types, strict=True):
        shape = tuple(int(resolve_dim(d, bindings)) for d in type_.shape)
        by_device = {next(iter(a.devices())).id: np.asarray(a) for a in per_device}
        held = [by_device[placed_on[device_id(mesh, c)].id] for c in coords]
        result = np.empty(shape, dtype=held[0].dtype)
        for coord, block in zip(coords, held, strict=True):
            result[_block(type_, shape, device_id(mesh, coord))] = block
        results.append(result)
    type_ = fn.body.type if fn.body is not None else fn.return_type
    return structure(results, type_)


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
