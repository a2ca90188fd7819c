"""One process's part of a multi-process run: join the run, load its shards, execute, return.

Every process calls `run_distributed(fn, loader)` with the same program. The SPMD module is the
single-process one (`lower_spmd`, the same text whatever the process count); partition `d` runs
on the `d`-th global device by (process, device id) (`placement`). Each process asks `loader`
only for the blocks its own devices hold, so no process materialises a global argument; it gets
back its devices' result blocks and, with `gather=True`, the global results (every process must
then ask, because gathering is itself a collective).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilefoundry.caches import LRU
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.exits.runtimes.distributed.config import (
    WHERE,
    ProcessConfig,
    config_from_environment,
)
from tilefoundry.exits.runtimes.distributed.placement import check_capacity, device_grid
from tilefoundry.exits.runtimes.xla_spmd import partition_spec
from tilefoundry.exits.stablehlo.spmd.mesh import axis_names
from tilefoundry.exits.stablehlo.spmd.module import SpmdModule, lower_spmd
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, resolve_dim

Index = tuple[slice, ...]
Loader = Callable[[int, Index], Any]
"""`loader(param_index, index)`: the block `global_argument[index]` of parameter `param_index`,
where `index` is one slice per axis; it is called once per distinct block this process holds."""

_JOINED: list[ProcessConfig] = []
_EXECUTABLES = LRU("distributed: executables", 64)
"""(id(fn), global shapes, process config) -> (executable, device grid), while fn lives."""


@dataclass(frozen=True)
class LocalShard:
    """One device's block of a result: its mesh coordinate, where it sits in the global value,
    and the data."""

    coord: tuple[int, ...]
    index: Index
    data: np.ndarray


@dataclass(frozen=True)
class DistributedResult:
    """What one process gets back: per flat result, the blocks its devices hold (in mesh
    coordinate order), and the global value (structured like run_xla's) when gathered."""

    process_id: int
    num_processes: int
    module: SpmdModule
    shards: tuple[tuple[LocalShard, ...], ...]
    value: Any = None


def initialize(config: ProcessConfig, *, timeout_s: int = 300) -> None:
    """Join the run (`jax.distributed.initialize`), once per process; CPU collectives go over
    gloo. Must run before this process first uses a jax backend."""
    import jax

    if _JOINED:
        if _JOINED[0] != config:
            raise UnsupportedError(
                f"{WHERE}: this process already joined {_JOINED[0]}; a process joins one run"
            )
        return
    if jax.distributed.is_initialized():  # the caller joined the run itself
        joined = (jax.process_count(), jax.process_index())
        if joined != (config.num_processes, config.process_id):
            raise UnsupportedError(
                f"{WHERE}: jax already joined a run as process {joined[1]} of {joined[0]}, "
                f"but the configuration says process {config.process_id} of "
                f"{config.num_processes}; pass config= matching the run, or none"
            )
        _JOINED.append(config)
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(
            coordinator_address=config.coordinator_address,
            num_processes=config.num_processes,
            process_id=config.process_id,
            initialization_timeout=timeout_s,
        )
    except RuntimeError as err:
        raise UnsupportedError(
            f"{WHERE}: process {config.process_id} of {config.num_processes} could not join "
            f"the run at {config.coordinator_address} ({str(err).splitlines()[0]}); join before "
            "this process runs anything else on jax"
        ) from None
    _JOINED.append(config)


def _this_process() -> ProcessConfig:
    """The environment's ProcessConfig, or, when the caller already joined a run with
    `jax.distributed.initialize()` (e.g. by jax's own cluster detection), that run's."""
    import sys

    if "jax" in sys.modules:
        import jax

        if jax.distributed.is_initialized():
            address = _joined_address() or "already-joined:0"  # not used again once joined
            return ProcessConfig(address, jax.process_count(), jax.process_index())
    return config_from_environment()


def _joined_address() -> str | None:
    try:
        from jax._src import distributed
    except ImportError:
        return None
    return getattr(getattr(distributed, "global_state", None), "coordinator_address", None)


def global_shapes(module: SpmdModule, bindings: Mapping[str, int]) -> list[tuple[int, ...]]:
    return [
        tuple(int(resolve_dim(d, bindings)) for d in type_.shape) for type_ in module.param_types
    ]


def run_distributed(
    fn: Function,
    loader: Loader,
    *,
    config: ProcessConfig | None = None,
    dims: Mapping[str, int] | None = None,
    gather: bool = False,
    timeout_s: int = 300,
) -> DistributedResult:
    """Run `fn`'s SPMD module as this process's part of a multi-process run (module doc).

    `config` defaults to `config_from_environment()`; `dims` binds the parameters' DimVars
    (there are no global arrays to read them from). A mesh the run cannot hold is refused
    before this process joins the run.
    """
    config = config or _this_process()
    bindings = dict(dims or {})
    module = lower_spmd(fn, bindings=bindings or None)
    check_capacity(module.mesh, config.num_processes, config.local_devices)
    shapes = global_shapes(module, bindings)
    initialize(config, timeout_s=timeout_s)

    import jax
    from jax.sharding import Mesh, NamedSharding

    key = (id(fn), tuple(shapes), config)
    entry = _EXECUTABLES.hit(key)
    if entry is None:
        grid = device_grid(module.mesh, jax.devices(), config.num_processes)
        entry = _EXECUTABLES.put(key, (_compile(module.text, grid), grid), owner=fn)
    executable, grid = entry
    jax_mesh = Mesh(grid, axis_names(module.mesh))
    coords = {device: coord for coord, device in np.ndenumerate(grid)}
    with jax.enable_x64(True):  # else 64-bit blocks would be narrowed to 32 bits
        inputs = []
        for i, (type_, shape) in enumerate(zip(module.param_types, shapes, strict=True)):
            sharding = NamedSharding(jax_mesh, partition_spec(type_, len(shape), module))
            reader = _checked_loader(loader, i, fn, type_, shape)
            inputs.append(jax.make_array_from_callback(shape, sharding, reader))
        outputs = executable.execute_sharded(inputs).disassemble_into_single_device_arrays()
        shards, arrays = [], []
        for per_device, type_ in zip(outputs, module.result_types, strict=True):
            shape = tuple(int(resolve_dim(d, bindings)) for d in type_.shape)
            sharding = NamedSharding(jax_mesh, partition_spec(type_, len(shape), module))
            where = sharding.addressable_devices_indices_map(shape)
            held = sorted(per_device, key=lambda a: coords[next(iter(a.devices()))])
            shards.append(
                tuple(
                    LocalShard(
                        coords[device := next(iter(a.devices()))],
                        _concrete(where[device], shape),
                        np.asarray(a),
                    )
                    for a in held
                )
            )
            if gather:
                arrays.append(jax.make_array_from_single_device_arrays(shape, sharding, held))
        value = _gather(arrays, fn) if gather else None
    return DistributedResult(config.process_id, config.num_processes, module, tuple(shards), value)


def _compile(text: str, grid: np.ndarray):
    from jax.extend import backend

    devices = list(grid.flat)
    client = devices[0].client
    options = backend.get_compile_options(
        num_replicas=1,
        num_partitions=len(devices),
        device_assignment=np.array([d.id for d in devices]).reshape(1, len(devices)),
    )
    options.executable_build_options.use_spmd_partitioning = True
    options.executable_build_options.use_shardy_partitioner = True
    return client.compile_and_load(text, devices, options)


def _concrete(index: Index, shape: tuple[int, ...]) -> Index:
    """`slice(None)` spelled out, so a caller can read where a block sits without the shape."""
    return tuple(slice(*s.indices(n)[:2]) for s, n in zip(index, shape, strict=True))


def _checked_loader(loader: Loader, i: int, fn: Function, type_: TensorType, shape):
    """The loader for parameter `i`, checked (shape and dtype of each block) and asked once per
    distinct block (a replicated parameter's block is held by several local devices)."""
    expected = np.dtype(type_.dtype.to_numpy())
    name = fn.params[i].name if i < len(fn.params) else f"#{i}"
    blocks: dict[tuple, np.ndarray] = {}

    def read(index: Index | None) -> np.ndarray:
        index = _concrete(index or tuple(slice(None) for _ in shape), shape)
        key = tuple((s.start, s.stop) for s in index)
        if key not in blocks:
            block = np.asarray(loader(i, index))
            want = tuple(s.stop - s.start for s in index)
            if block.shape != want or block.dtype != expected:
                raise EvalError(
                    f"{WHERE}: the loader gave parameter '{name}' a block of shape "
                    f"{block.shape} and dtype {block.dtype} for global index {_text(index)}; "
                    f"expected shape {want} and dtype {expected}"
                )
            blocks[key] = block
        return blocks[key]

    return read


def _text(index: Index) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in index) + "]"


def _gather(arrays: list, fn: Function) -> Any:
    """Every process assembles every global result (a collective: all must call it)."""
    from jax.experimental import multihost_utils

    from tilefoundry.exits.runtimes.xla import structure

    flat = [np.asarray(multihost_utils.process_allgather(a, tiled=True)) for a in arrays]
    return structure(flat, fn.body.type if fn.body is not None else fn.return_type)
