"""Run HIR functions on XLA through jaxlib: emit StableHLO, compile once per shape, execute.

`run_xla(fn, *arrays)` binds DimVars from the argument shapes (selecting a dispatch variant),
emits and compiles the module for those concrete shapes, caches the executable per (function,
shapes, dtypes), and returns numpy results shaped like the function's return type (a tuple return
gives a tuple).

`run_xla(fn, *arrays, devices=N)` is the SPMD path (`tilefoundry.exits.spmd`): the function's
device mesh must have N devices; each global argument is placed on the devices by its parameter's
ShardLayout, the module runs partitioned on N XLA devices, and the results come back gathered to
global arrays. XLA must have been started with N devices (on CPU:
`XLA_FLAGS=--xla_force_host_platform_device_count=N` before jax first initialises a backend).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.footprint import check_memory
from tilefoundry.ir.hir.signature import check_arguments
from tilefoundry.ir.hir.walk import call_depth
from tilefoundry.ir.types import TupleType

_EXECUTABLES: dict[tuple, Any] = {}
CACHED_EXECUTABLES = 64
"""Executables kept (least recently used dropped first): each holds its function alive, so an
unbounded cache grew with every function ever run (a program re-parsed in a loop)."""
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


def bind_dims(
    fn: Function, arrays: tuple[np.ndarray, ...], caller: str = "run_xla"
) -> dict[str, int]:
    """DimVar name -> extent for checked arguments (`check_inputs`)."""
    return check_inputs(fn, arrays, caller)[1]


def _executable(text: str):
    """The module compiled for one CPU device, called through `execute`: the fallback for a
    module jax's jit cannot wrap (a dtype jax has no name for)."""
    import jax
    from jax.extend import backend

    cpu = backend.get_backend("cpu")
    options = backend.get_compile_options(num_replicas=1, num_partitions=1)
    executable = cpu.compile_and_load(text, cpu.devices()[:1], options)

    def run(*arrays: np.ndarray) -> list[np.ndarray]:
        with jax.enable_x64(True):  # else device_put narrows i64/u64/f64 inputs to 32 bits
            outputs = executable.execute(jax.device_put(list(arrays), cpu.devices()[0]))
        return [np.asarray(o) for o in outputs]

    return run


def compiled_text(fn: Function, *arrays: np.ndarray) -> str:
    """The StableHLO text run_xla compiles for these arguments."""
    from tilefoundry.exits.stablehlo import emit_stablehlo

    return emit_stablehlo(fn, bindings=bind_dims(fn, arrays) or None)


def run_xla(fn: Function, *arrays: Any, devices: int | None = None) -> Any:
    if not isinstance(fn, Function):
        raise EvalError(f"run_xla: expected a hir Function, got {type(fn).__name__}")
    arrays, bindings = check_inputs(fn, arrays)
    check_memory(fn, bindings, "run_xla")
    depth = call_depth(fn)
    if depth > MAX_CALL_DEPTH:
        raise UnsupportedError(
            f"run_xla: Function {fn.name} nests @func calls {depth} deep; XLA's compiler "
            f"crashes on call chains of about 200 (measured with jaxlib 0.10.2), so this exit "
            f"takes at most {MAX_CALL_DEPTH}; merge some functions, or run it on the reference "
            "backend"
        )
    if devices is not None and devices != 1:
        from tilefoundry.exits.spmd.xla import run_spmd

        return run_spmd(fn, arrays, devices, bind_dims)
    key = (id(fn), tuple((a.shape, a.dtype.str) for a in arrays))
    entry = _EXECUTABLES.pop(key, None)
    if entry is None:  # new (shapes, dtypes), already checked against the signature: compile
        from tilefoundry.exits.xla_jit import jitted

        text = compiled_text(fn, *arrays)
        try:
            call = jitted(text)
        except LookupError:
            call = _executable(text)
        entry = (fn, call)  # the held `fn` keeps id(fn) from being reused while cached
    _EXECUTABLES[key] = entry  # most recently used last
    while len(_EXECUTABLES) > CACHED_EXECUTABLES:
        del _EXECUTABLES[next(iter(_EXECUTABLES))]
    flat = entry[1](*arrays)
    return structure(flat, fn.body.type if fn.body is not None else fn.return_type)


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
