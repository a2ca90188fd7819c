"""What the 8-device worker runs for test_spmd_jit_path.py: run_xla(..., devices=8) next to the
executable compiled directly for the same module and called the way the SPMD exit called it
before it went through jit (`jax.device_put` of each argument, `execute_sharded`, blocks
gathered with numpy by the module's own block geometry)."""

from itertools import product as cartesian
from math import prod

import numpy as np


def _block(type_, shape, device: int) -> tuple:
    """The global index of the block `device` holds, from `canonical_splits` (mixed radix over
    each Split's mesh axes, outermost first: DESIGN §4.13), not from jax's sharding."""
    from tilefoundry.ir.types.shard.mesh import c_order_strides
    from tilefoundry.sharding.shard_reading import canonical_splits

    splits = canonical_splits(type_, "test", "the test")
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


def _fn(name: str):
    from exits.spmd.sharded_programs import PROGRAMS

    return PROGRAMS[name].sharded


def direct_run(name: str, arrays: tuple) -> list[np.ndarray]:
    """The module executed without jit: each argument placed by `jax.device_put`, every device's
    result block read back and put where `_block` says it belongs."""
    import jax
    from jax.sharding import Mesh, NamedSharding

    from tilefoundry.exits.runtimes.xla_spmd import _compile, partition_spec
    from tilefoundry.exits.stablehlo.spmd.mesh import axis_names, device_id
    from tilefoundry.exits.stablehlo.spmd.module import lower_spmd

    module = lower_spmd(_fn(name))
    mesh = module.mesh
    executable, placed_on = _compile(module.text, prod(mesh.shape))
    jax_mesh = Mesh(np.array(placed_on).reshape(mesh.shape), axis_names(mesh))
    inputs = [
        jax.device_put(a, NamedSharding(jax_mesh, partition_spec(t, a.ndim, module)))
        for a, t in zip(arrays, module.param_types, strict=True)
    ]
    outputs = executable.execute_sharded(inputs).disassemble_into_single_device_arrays()
    results = []
    for per_device, type_ in zip(outputs, module.result_types, strict=True):
        shape = tuple(int(d) for d in type_.shape)
        by_device = {next(iter(a.devices())).id: np.asarray(a) for a in per_device}
        result = np.full(shape, np.nan, dtype=next(iter(by_device.values())).dtype)
        for coord in cartesian(*(range(e) for e in mesh.shape)):
            device = device_id(mesh, coord)
            result[_block(type_, shape, device)] = by_device[placed_on[device].id]
        results.append(result)
    return results


def run_xla_flat(name: str, arrays: tuple) -> list[np.ndarray]:
    from tilefoundry.exits.runtimes.xla import run_xla

    got = run_xla(_fn(name), *arrays, devices=8)
    return list(got) if isinstance(got, tuple) else [got]


def collectives(name: str, arrays: tuple) -> tuple[list[str], list[str]]:
    """The collective instructions of the directly compiled executable and of the one jit
    builds for run_xla (jit must add no resharding around our manual module)."""
    import re

    from tilefoundry.exits.runtimes.xla_spmd import _compile, spmd_function
    from tilefoundry.exits.stablehlo.spmd.module import lower_spmd

    found = re.compile(r" (all-reduce|reduce-scatter|all-gather|all-to-all|collective-permute)")
    module = lower_spmd(_fn(name))
    executable, _ = _compile(module.text, 8)
    direct = "\n".join(m.to_string() for m in executable.hlo_modules())
    jitted = spmd_function(_fn(name), 8, {}).call.lower(*arrays).compile().as_text()
    return found.findall(direct), found.findall(jitted)


def exported_devices(name: str) -> tuple[int, list]:
    """`nr_devices` of the Exported run_xla builds and the jit in_shardings' specs."""
    from tilefoundry.exits.runtimes.xla_jit import exported_module
    from tilefoundry.exits.stablehlo.spmd.module import lower_spmd

    exported = exported_module(lower_spmd(_fn(name)).text, num_devices=8)
    return exported.nr_devices, [a.shape for a in exported.in_avals]
