"""`tilefoundry.jit`: a compiled step whose state lives on the devices between calls.

`run_xla` is numpy in, numpy out: every call copies every argument to the devices and every
result back, which for a training step is the whole model twice per step. A `DeviceStep` is the
same compiled module (one device, or the SPMD module on N, also across processes) called on
`jax.Array`s that already hold each parameter's blocks with its NamedSharding (`place`), and it
returns `jax.Array`s of each result's sharding, so the next step takes them as they are. Nothing
moves to the host unless asked (`fetch`); under `jax.transfer_guard("disallow")` a step on placed
arrays runs (tests/exits/test_device_step.py).

`donate_argnums` are jax's: the buffers of a donated argument are given to the results (XLA
aliases each donated input with a result of its type and sharding, and the input array is
deleted), so a step that replaces its parameters and optimizer state holds one copy of them, not
two. The module is compiled on the first call per argument shapes, after the same checks as
`run_xla` (signature, memory estimate, call depth); a later call is jax's own C++ dispatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.signature import check_array_signature
from tilefoundry.ir.types import TupleType

CALLER = "tilefoundry.jit"


@dataclass(frozen=True)
class _Program:
    """The step compiled for one signature (argument shapes and dtypes)."""

    call: Callable[..., Any]
    """`jax.jit` of the module: a tuple of jax arrays in and out."""
    in_shardings: tuple[Any, ...]
    out_shardings: tuple[Any, ...]
    wide: bool
    """A 64-bit dtype: x64 is on around the call (else jax narrows it)."""


class DeviceStep:
    """A Function compiled for device-resident arguments: see the module doc and
    docs/training.md. Made by `tilefoundry.jit`."""

    def __init__(self, fn: Function, devices: int | None, donate_argnums: Sequence[int]):
        if not isinstance(fn, Function):
            raise EvalError(f"{CALLER}: expected a hir Function, got {type(fn).__name__}")
        donated = tuple(sorted({int(i) for i in donate_argnums}))
        for index in donated:
            if not 0 <= index < len(fn.params):
                raise EvalError(
                    f"{CALLER}: donate_argnums names argument {index}, but {fn.name} takes "
                    f"{len(fn.params)} ({', '.join(p.name for p in fn.params)})"
                )
        self.fn, self.devices, self.donate_argnums = fn, devices, donated
        self._programs: dict[tuple, _Program] = {}
        self._return_type = fn.body.type if fn.body is not None else fn.return_type

    def __call__(self, *arrays: Any) -> Any:
        """The step on placed arrays (`place`, or a previous step's results); numpy arguments
        are placed by jit on the way in (a host transfer, as with `jax.jit`)."""
        program = self._program(arrays)
        with _x64(program.wide):
            flat = program.call(*arrays)
        return _structure(list(flat), self._return_type)

    def place(self, *arrays: Any) -> tuple[Any, ...]:
        """Each argument as a `jax.Array` with its parameter's sharding. A global numpy array is
        cut into blocks, and each process puts on its devices only the blocks they hold; a
        `jax.Array` already placed so is returned as it is."""
        import jax

        program = self._program(arrays)
        placed = []
        with _x64(program.wide):
            for array, sharding in zip(arrays, program.in_shardings, strict=True):
                if isinstance(array, jax.Array):
                    same = array.sharding.is_equivalent_to(sharding, array.ndim)
                    placed.append(array if same else jax.device_put(array, sharding))
                    continue
                host = np.asarray(array)
                placed.append(
                    jax.make_array_from_callback(
                        host.shape, sharding, lambda index, a=host: a[index]
                    )
                )
        return tuple(placed)

    def in_shardings(self, *arrays: Any) -> tuple[Any, ...]:
        """The NamedSharding (SingleDeviceSharding on one device) each argument is placed
        with, for arguments of these shapes and dtypes."""
        return self._program(arrays).in_shardings

    def out_shardings(self, *arrays: Any) -> tuple[Any, ...]:
        """The sharding of each flat result, for arguments of these shapes and dtypes."""
        return self._program(arrays).out_shardings

    def compiled(self, *arrays: Any) -> Any:
        """jax's compiled executable for these arguments (its `memory_analysis()`, `as_text()`),
        compiled from the same module the step calls."""
        program = self._program(arrays)
        with _x64(program.wide):
            return program.call.lower(*_avals(arrays)).compile()

    def _program(self, arrays: Sequence[Any]) -> _Program:
        key = tuple((tuple(a.shape), str(a.dtype)) if hasattr(a, "dtype") else a for a in arrays)
        try:
            program = self._programs.get(key)
        except TypeError:  # an unhashable non-array argument: the check below names it
            program = None
        if program is None:
            program = self._programs[key] = self._compile(arrays)
        return program

    def _compile(self, arrays: Sequence[Any]) -> _Program:
        from tilefoundry.exits.runtimes.xla import check_program

        fn = self.fn
        dims = check_array_signature(fn.name, fn.params, arrays, CALLER)
        bindings = {var.name: extent for var, extent in dims.items()}
        check_program(fn, bindings, CALLER)
        if self.devices is not None and self.devices != 1:
            from tilefoundry.exits.runtimes.xla_spmd import spmd_function

            function = spmd_function(
                fn, self.devices, bindings, donate_argnums=self.donate_argnums, caller=CALLER
            )
        else:
            function = _one_device(fn, bindings, self.donate_argnums)
        with _x64(function.wide):
            compiled = function.call.lower(*_avals(arrays)).compile()
        return _Program(
            function.call,
            tuple(compiled.input_shardings[0]),
            tuple(compiled.output_shardings),
            function.wide,
        )


def _avals(arrays: Sequence[Any]) -> list[Any]:
    """Shapes and dtypes to compile for: jit lowers numpy arguments only when they are
    replicated on this process, and a compile reads no data."""
    import jax

    return [jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in arrays]


def _x64(wide: bool):
    """x64 on around a call of a module with a 64-bit dtype (else jax narrows its arrays)."""
    import jax

    return jax.enable_x64(True) if wide else nullcontext()


def _one_device(fn: Function, bindings: dict[str, int], donate_argnums: tuple[int, ...]):
    import jax

    from tilefoundry.exits.runtimes.xla_jit import jax_function
    from tilefoundry.exits.stablehlo import emit_stablehlo

    if jax.process_count() != 1:
        raise UnsupportedError(
            f"{CALLER}: {fn.name} is a one-device program, but this process joined a run of "
            f"{jax.process_count()} processes; pass devices= the size of its device mesh"
        )
    text = emit_stablehlo(fn, bindings=bindings or None)
    try:
        return jax_function(text, donate_argnums=donate_argnums)
    except LookupError as err:
        raise UnsupportedError(f"{CALLER}: {fn.name}: {err}; run it with run_xla") from None


def fetch(value: Any) -> Any:
    """`value` (a step's result: a jax array or a tuple of them) as numpy, gathered across
    processes when it is not fully addressable here (every process must then call it)."""
    if isinstance(value, tuple):
        return tuple(fetch(v) for v in value)
    if getattr(value, "is_fully_addressable", True):
        return np.asarray(value)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def _structure(flat: list[Any], type_: Any) -> Any:
    from tilefoundry.exits.runtimes.xla import structure

    return structure(flat, type_) if isinstance(type_, TupleType) else flat[0]


def jit(fn: Function, *, devices: int | None = None, donate_argnums: Sequence[int] = ()):
    """`fn` compiled for device-resident arguments and results (`DeviceStep`): on one XLA device,
    or with `devices=N` the SPMD module on the N devices of its mesh (across processes when this
    process joined a `jax.distributed` run). `donate_argnums` name the arguments whose buffers
    the results may take (the state a training step replaces)."""
    return DeviceStep(fn, devices, donate_argnums)
