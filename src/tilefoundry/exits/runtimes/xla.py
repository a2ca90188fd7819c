"""Run HIR functions on XLA through jaxlib: emit StableHLO, compile once per shape, execute.

`run_xla(fn, *arrays)` binds DimVars from the argument shapes (selecting a dispatch variant),
emits and compiles the module for those concrete shapes, caches the executable per (function,
device count, shapes, dtypes), and returns numpy results shaped like the function's return type
(a tuple return gives a tuple).

Per call (issue 19: as fast as `jax.jit`): the first call of a (function, shapes, dtypes) runs
every check (`check_inputs`, the memory estimate, the call depth) and compiles; the module is
called through a cached `jax.jit` of a `jax.export.Exported` (`exits.runtimes.xla_jit`), so numpy
arguments take jit's C++ argument path. A later call with ndarrays of the same shapes and dtypes
is one cache look-up and that jit call: the checks it would repeat depend on nothing else, except
`TILEFOUNDRY_MEMORY_LIMIT`, whose change re-admits the call.

`run_xla(fn, *arrays, devices=N)` is the SPMD path (`tilefoundry.exits.stablehlo.spmd`), and so
is `run_xla(fn, *arrays)` of a program on a device mesh, which runs on that mesh's device count
(`ir.hir.facts.device_count`, read from the whole body as the exits read it). The function's
device mesh must have N devices; each global argument is placed on the devices by its parameter's
ShardLayout, the module runs partitioned on N XLA devices, and the results come back
gathered to global arrays. XLA must have been started with N devices (on CPU:
`XLA_FLAGS=--xla_force_host_platform_device_count=N` before jax first initialises a backend).

Both paths run on the devices of jax's default backend (CPU, or a GPU where jax has one), and
the modules they call declare that platform (`xla_jit.exported_module`).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from tilefoundry.caches import LRU
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.facts import device_count
from tilefoundry.ir.hir.footprint import check_memory, memory_setting
from tilefoundry.ir.hir.signature import check_arguments
from tilefoundry.ir.hir.walk import call_depth
from tilefoundry.ir.types import TupleType


class _Entry(NamedTuple):
    """A compiled function for one (function, device count, shapes, dtypes). It does not hold
    the function: the entry goes when the function does (`caches`), so `id(fn)` in its key is
    never another function's."""

    run: Callable[..., Any]
    """Numpy arguments in, numpy results out, shaped like the function's return type."""
    memory_setting: bytes | str | None
    """`TILEFOUNDRY_MEMORY_LIMIT` (`footprint.memory_setting()`) when the run was admitted:
    another value re-checks."""


_SIGNATURE = attrgetter("shape", "dtype", "__class__")
CACHED_EXECUTABLES = 64
"""Executables kept (least recently used dropped first): an unbounded cache grew with every
function ever run (a program re-parsed in a loop)."""
_EXECUTABLES = LRU("run_xla: executables", CACHED_EXECUTABLES)
MAX_CALL_DEPTH = 128
"""Nested calls XLA compiles safely (its CPU compiler segfaults between 160 and 200 levels)."""


def check_inputs(
    fn: Function, arrays: tuple[Any, ...], caller: str = "run_xla"
) -> tuple[tuple[np.ndarray, ...], dict[str, int]]:
    """The arguments checked exactly as `evaluate` checks them (count, dtype, shape:
    `check_arguments`, so a wrong dtype is refused, never reinterpreted) and the DimVar
    bindings by name, for every exit that runs a function on concrete arrays; `caller` names
    that exit in errors."""
    checked, bindings = check_arguments(fn.name, fn.params, arrays, caller)
    return checked, {var.name: extent for var, extent in bindings.items()}


def argument_dims(
    fn: Function, arrays: tuple[np.ndarray, ...], caller: str = "run_xla"
) -> dict[str, int]:
    """DimVar name -> extent, read off checked arguments (`check_inputs`). Not the CLI's
    `cli.program.bind_dims`, which chooses an extent for each DimVar (given or drawn)."""
    return check_inputs(fn, arrays, caller)[1]


def _executable(text: str):
    """The module compiled for one device of jax's default backend, called through `execute`:
    the fallback for a module jax's jit cannot wrap (a dtype jax has no name for)."""
    import jax
    from jax.extend import backend

    devices = backend.get_backend()
    options = backend.get_compile_options(num_replicas=1, num_partitions=1)
    executable = devices.compile_and_load(text, devices.devices()[:1], options)

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
        with jax.enable_x64(True):  # else device_put narrows i64/u64/f64 inputs to 32 bits
            outputs = executable.execute(jax.device_put(list(arrays), devices.devices()[0]))
        return [np.asarray(o) for o in outputs]

    return run


def compiled_text(fn: Function, *arrays: np.ndarray) -> str:
    """The StableHLO text run_xla compiles for these arguments."""
    from tilefoundry.exits.stablehlo import emit_stablehlo

    return emit_stablehlo(fn, bindings=argument_dims(fn, arrays) or None)


def _cache_key(fn: Any, arrays: tuple[Any, ...], devices: Any) -> tuple:
    """Function, device count and each argument's (shape, dtype, type). Only checked arguments
    (ndarrays) are ever stored, so a hit means these exact arguments already passed every check
    and none is repeated; a key with another type (a list, a jax array) never hits."""
    return (id(fn), devices, *map(_SIGNATURE, arrays))


def run_xla(fn: Function, *arrays: Any, devices: int | None = None) -> Any:
    try:  # `_cache_key`, inlined: this path is the whole per-call cost on a small program
        key = (id(fn), devices, *map(_SIGNATURE, arrays))
        entry = _EXECUTABLES[key]  # `_EXECUTABLES.hit(key)`, inlined
        _EXECUTABLES.move_to_end(key)  # most recently used last (a KeyError if another
        # thread dropped it meanwhile: then it is admitted again)
    except (AttributeError, TypeError, KeyError):  # no shape/dtype, unhashable, or a miss
        entry = None
    if entry is None or entry.memory_setting != memory_setting():
        entry, arrays = _admit(fn, arrays, devices)
    return entry.run(*arrays)


def _admit(
    fn: Function, arrays: tuple[Any, ...], devices: int | None
) -> tuple[_Entry, tuple[np.ndarray, ...]]:
    """Every check of a first call (arguments, memory, call depth), then the compiled entry,
    cached under the checked arrays' key while `fn` lives, and the checked arrays (ndarrays) to
    run it on."""
    if not isinstance(fn, Function):
        raise EvalError(f"run_xla: expected a hir Function, got {type(fn).__name__}")
    arrays, bindings = check_inputs(fn, arrays)
    check_program(fn, bindings, "run_xla")
    key = _cache_key(fn, arrays, devices)
    entry = _EXECUTABLES.get(key)
    if entry is None:  # new (shapes, dtypes), already checked against the signature: compile
        entry = _Entry(_compiled(fn, arrays, bindings, devices), None)
    entry = entry._replace(memory_setting=memory_setting())
    return _EXECUTABLES.put(key, entry, owner=fn), arrays


def check_program(fn: Function, bindings: dict[str, int], caller: str) -> None:
    """What XLA is given only once these hold: the memory estimate fits, and the call chain is
    one XLA's compiler survives."""
    check_memory(fn, bindings, caller)
    depth = call_depth(fn)
    if depth > MAX_CALL_DEPTH:
        raise UnsupportedError(
            f"{caller}: Function {fn.name} nests @func calls {depth} deep; XLA's compiler "
            f"crashes on call chains of about 200 (measured with jaxlib 0.10.2), so this exit "
            f"takes at most {MAX_CALL_DEPTH}; merge some functions, or run it on the reference "
            "backend"
        )


def _compiled(
    fn: Function, arrays: tuple[np.ndarray, ...], bindings: dict[str, int], devices: int | None
) -> Callable[..., Any]:
    """The entry's `run`: jitted (one device, or the SPMD module on `devices`), a single result
    returned as is, several regrouped by the return type."""
    type_ = fn.body.type if fn.body is not None else fn.return_type
    nested = isinstance(type_, TupleType)
    needed = device_count(fn)
    if devices is None:
        devices = needed  # the mesh's own count (DESIGN §4.13); None: one device
    if devices is not None and (devices != 1 or (needed or 1) != 1):
        from tilefoundry.exits.runtimes.xla_spmd import spmd_runner

        flat_run = spmd_runner(fn, devices, bindings, flat=nested)
    else:
        from tilefoundry.exits.runtimes.xla_jit import jitted

        text = compiled_text(fn, *arrays)
        try:
            flat_run = jitted(text, flat=nested)
        except LookupError:
            fallback = _executable(text)
            flat_run = fallback if nested else (lambda *a: fallback(*a)[0])
    if not nested:
        return flat_run
    return lambda *a: structure(flat_run(*a), type_)


def structure(flat: list[np.ndarray], type_: Any) -> Any:
    """Flat results regrouped as the return type nests them (a tuple return gives a tuple)."""
    if isinstance(type_, TupleType):
        out = []
        for field in type_.fields:
            width = _width(field)
            out.append(structure(flat[:width], field))
            flat = flat[width:]
        return tuple(out)
    return flat[0]


def _width(type_: Any) -> int:
    return sum(_width(f) for f in type_.fields) if isinstance(type_, TupleType) else 1
