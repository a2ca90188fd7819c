"""Memory a run of a function needs, estimated from its types before any array is allocated.

The evaluator and the exits refuse a program that cannot fit up front, naming the figure, instead
of failing with a MemoryError (or being killed) after allocating for seconds. The estimate is the
bytes of every parameter and every value the body computes, each at its concrete shape: the
reference evaluator keeps every value of an activation alive, so for it this is the peak; for XLA
it is an upper bound. A value on a mesh counts once per device that holds a copy (the simulator
keeps one array per device: a Split shares the value out, a Broadcast or Partial replicates it).

The limit is `TILEFOUNDRY_MEMORY_LIMIT` (bytes, or with a K/M/G/T suffix) when set, else the
machine's physical memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from math import prod
from typing import Any

from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Expr
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.types import TensorType, TupleType, Type, resolve_dim, tensor_fields
from tilefoundry.ir.types.shard import ShardLayout, Split

MEMORY_ENV = "TILEFOUNDRY_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _setting_reader() -> Callable[[], bytes | str | None]:
    """`TILEFOUNDRY_MEMORY_LIMIT` as the process environment holds it now, for the hot paths
    that re-check a cached admission when the setting changed (run_xla's and evaluate's cached
    calls). `os.environ.get` of an unset variable costs about 1.2 µs (two exceptions inside the
    mapping), a few percent of a cached run_xla call; libc's `getenv`, called with the GIL held,
    reads the same environment (every `os.environ` write calls `setenv`/`unsetenv`) in 0.2 µs.
    Where libc cannot be loaded, `os.environ.get`."""
    try:
        import ctypes

        getenv = ctypes.PyDLL(None).getenv
    except Exception:  # no libc to load by that name (Windows): the mapping it is
        return partial(os.environ.get, MEMORY_ENV)
    getenv.restype = ctypes.c_char_p
    getenv.argtypes = (ctypes.c_char_p,)
    return partial(getenv, os.fsencode(MEMORY_ENV))


memory_setting = _setting_reader()
"""`memory_setting()`: the setting's current raw value, None when unset (see `_setting_reader`);
compare two readings for a change, parse with `memory_limit`."""


def memory_limit() -> int | None:
    """The bytes a run may use: the environment's setting, else physical memory (None when
    neither is known, which disables the check)."""
    text = os.environ.get(MEMORY_ENV, "").strip().upper().removesuffix("B")
    if text:
        unit = text[-1] if text[-1] in _UNITS else ""
        number = text[: len(text) - len(unit)]
        try:
            return int(float(number) * _UNITS[unit])
        except ValueError:
            raise EvalError(
                f"{MEMORY_ENV}={os.environ[MEMORY_ENV]!r} is not a size; write bytes or a "
                "number with K, M, G or T (e.g. 8G)"
            ) from None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def value_bytes(type_: Type, bindings: Mapping[Any, int]) -> int:
    """Bytes the values of `type_` occupy at the bound shapes, mesh copies included."""
    total = 0
    for tensor in tensor_fields(type_) if isinstance(type_, TensorType | TupleType) else ():
        count = 1
        for dim in tensor.shape:
            try:
                count *= dim if isinstance(dim, int) else resolve_dim(dim, bindings)
            except VerifyError:
                return total  # an extent no binding resolves is not counted
        total += (count * tensor.dtype.itemsize_bits + 7) // 8 * _copies(tensor)
    return total


def _copies(tensor: TensorType) -> int:
    layout = tensor.layout
    if not isinstance(layout, ShardLayout):
        return 1
    extents = [e if isinstance(e, int) else 1 for e in layout.mesh.shape]
    split = [e for e, attr in zip(extents, layout.attrs, strict=True) if isinstance(attr, Split)]
    return prod(extents) // max(1, prod(split))


def program_bytes(fn: Any, bindings: Mapping[Any, int]) -> int:
    """The estimate for one run of `fn` (parameters plus every value its body computes)."""
    total = sum(value_bytes(p.type, bindings) for p in fn.params)
    if isinstance(fn.body, Expr):
        params = set(fn.params)
        for node in iter_nodes(fn.body):
            if node not in params:
                total += value_bytes(node.type, bindings)
    return total


def size_text(count: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if count >= _UNITS[unit]:
            return f"{count / _UNITS[unit]:.1f} {unit}iB"
    return f"{count} bytes"


def check_memory(fn: Any, bindings: Mapping[Any, int], caller: str) -> None:
    """Refuse a run that cannot fit in the memory limit, before anything is allocated."""
    limit = memory_limit()
    if limit is None:
        return
    needed = program_bytes(fn, bindings)
    if needed > limit:
        source = MEMORY_ENV if os.environ.get(MEMORY_ENV) else "this machine's memory"
        raise EvalError(
            f"{caller}: Function {fn.name} needs about {size_text(needed)} for its values at "
            f"these shapes, more than the {size_text(limit)} limit ({source}); use smaller "
            f"shapes, or set {MEMORY_ENV} (e.g. {MEMORY_ENV}=64G) to raise the limit"
        )
