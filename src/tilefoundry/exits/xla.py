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
from tilefoundry.ir.hir.signature import bind_dim_vars
from tilefoundry.ir.types import TensorType, TupleType

_EXECUTABLES: dict[tuple, Any] = {}


def bind_dims(
    fn: Function, arrays: tuple[np.ndarray, ...], caller: str = "run_xla"
) -> dict[str, int]:
    """DimVar name -> extent read off the argument shapes (the one binding rule,
    `bind_dim_vars`), for every exit that runs a function on concrete arrays; `caller` names
    that exit in errors."""
    if len(arrays) != len(fn.params):
        raise EvalError(f"{caller}: {fn.name} takes {len(fn.params)} arguments, got {len(arrays)}")
    for param in fn.params:
        if not isinstance(param.type, TensorType):
            raise UnsupportedError(f"{caller}: parameter '{param.name}' is not a tensor")
    bindings = bind_dim_vars(fn.name, fn.params, [np.shape(a) for a in arrays])
    return {var.name: extent for var, extent in bindings.items()}


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
    if devices is not None and devices != 1:
        from tilefoundry.exits.spmd.xla import run_spmd

        return run_spmd(fn, tuple(np.asarray(a) for a in arrays), devices, bind_dims)
    arrays = tuple(np.asarray(a) for a in arrays)
    key = (id(fn), tuple((a.shape, a.dtype) for a in arrays))
    entry = _EXECUTABLES.get(key)
    if entry is None:  # a new (shapes, dtypes): check them against the signature, then compile
        from tilefoundry.exits.xla_jit import jitted

        text = compiled_text(fn, *arrays)
        _check_dtypes(fn, arrays)
        try:
            call = jitted(text)
        except LookupError:
            call = _executable(text)
        entry = _EXECUTABLES[key] = (fn, call)
    flat = entry[1](*arrays)  # the held `fn` keeps id(fn) from being reused while cached
    return structure(flat, fn.body.type if fn.body is not None else fn.return_type)


def _check_dtypes(fn: Function, arrays: tuple[np.ndarray, ...]) -> None:
    """An EvalError naming the parameter whose argument has another dtype (XLA would refuse it
    with its own error, or jax would narrow it silently)."""
    for param, array in zip(fn.params, arrays, strict=True):
        expected = np.dtype(param.type.dtype.to_numpy())
        if array.dtype != expected:
            raise EvalError(
                f"run_xla: Function {fn.name}: parameter '{param.name}' is "
                f"{param.type.dtype.name} ({expected}), got an array of dtype {array.dtype}; "
                "convert it with .astype(...) first"
            )


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
