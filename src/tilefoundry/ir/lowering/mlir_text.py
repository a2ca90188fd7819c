"""Spelling IR types and literals as StableHLO text, shared by the emitter and op lowering rules.

The emitter writes text, not MLIR objects, so it needs no jax at import time (DESIGN §5); jaxlib
only checks the result. Everything the text cannot express fails closed with UnsupportedError:
a symbolic extent the caller did not bind, a dtype StableHLO lacks, a physical layout that is not
the logical row-major order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import DType, TensorType, TupleType, Type, is_static, resolve_dim
from tilefoundry.ir.types.shard import Layout, ShardLayout
from tilefoundry.ir.types.shard.int_tuple import flatten

_ELEMENT_TYPES = {
    "bool": "i1",
    "i8": "i8",
    "i16": "i16",
    "i32": "i32",
    "i64": "i64",
    "u8": "ui8",
    "u16": "ui16",
    "u32": "ui32",
    "u64": "ui64",
    "f16": "f16",
    "bf16": "bf16",
    "f32": "f32",
    "f64": "f64",
    "fp8e4m3": "f8E4M3FN",
    "f8e8m0": "f8E8M0FNU",
    "f4e2m1": "f4E2M1FN",
}
"""DType name -> StableHLO element type. This is the exit's dtype support table (DESIGN §4.9).

What runs where (jaxlib 0.10.2, XLA CPU; checked by tests/exits/test_stablehlo_ops.py):
- every entry parses, verifies and serialises to a portable artifact at the pinned 1.13.0;
- every entry runs on XLA CPU: parameters, results, convert to/from f32, add, maximum,
  compare/select, concatenate and slice were probed for each, and the op tests run the numeric
  dtypes through every lowering rule;
- narrow floats (f16, bf16, f8E4M3FN, f8E8M0FNU, f4E2M1FN) are computed in f32 and rounded once
  by the op rules, as the reference kernels do, so no rule depends on narrow-float arithmetic;
- f4E2M1FN has no reference-evaluator kernels, so its tests compare with ml_dtypes directly;
- i64/u64/f64 arguments need 64-bit transfers: `run_xla` enables jax's x64 for device_put
  (without it jax silently narrows them to 32 bits and XLA rejects the buffers).
"""


def element_type(dtype: DType) -> str:
    try:
        return _ELEMENT_TYPES[dtype.name]
    except KeyError:
        raise UnsupportedError(
            f"StableHLO exit: dtype {dtype.name} has no StableHLO type"
        ) from None


MAX_EXTENT = 2**63 - 1
"""StableHLO extents are signed 64-bit integers."""


def static_shape(type_: TensorType, bindings: Mapping[Any, int] | None = None) -> tuple[int, ...]:
    """The concrete extents of `type_`, resolving DimVars through `bindings` (run_xla passes the
    call's argument shapes; the emitted module is always static)."""
    dims = []
    for dim in type_.shape:
        if is_static(dim):
            dims.append(int(dim))
        elif bindings:
            dims.append(int(resolve_dim(dim, bindings)))
        else:
            raise UnsupportedError(
                f"StableHLO exit: extent {dim} is symbolic; emit with concrete shapes "
                "(run_xla binds them from the arguments)"
            )
        if not 0 <= dims[-1] <= MAX_EXTENT:
            raise UnsupportedError(
                f"StableHLO exit: extent {dims[-1]} of {type_} is outside StableHLO's signed "
                "64-bit range [0, 2**63); use smaller dimensions"
            )
    return tuple(dims)


def is_on_one_device(layout: object) -> bool:
    """A ShardLayout over a `cta` mesh: the CTAs of ONE device share its work (DESIGN §4.13), so
    the single-device exit runs the program's unsharded meaning — each value its global value,
    as the mesh simulation gathers it (DESIGN §4.12) — and the CTA grid is a schedule it leaves
    to XLA. Per-CTA values (Local) have no global value and stay refused by their own rule. A
    device mesh of one device is one device too: each of its shards is the whole value."""
    return isinstance(layout, ShardLayout) and mesh_is_on_one_device(layout.mesh)


def mesh_is_on_one_device(mesh: object) -> bool:
    """Whether every level of `mesh` is a CTA grid inside one device, or `mesh` is a device
    mesh of one device (see is_on_one_device). The second matters at XLA: an SPMD module of one
    partition is never partitioned, so its Shardy custom calls reach the runtime unlowered."""
    names = {t.name for t in mesh.topologies}
    if names == {"cta"}:
        return True
    return names == {"device"} and all(extent == 1 for extent in mesh.shape)


_SYMBOL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def mlir_symbol(name: str, empty: str = "tilefoundry") -> str:
    """`name` as an MLIR bare identifier (ASCII letters, digits and `_`, not starting with a
    digit), mangled deterministically: other ASCII characters become `_`, a non-ASCII one
    becomes `_U<hex code point>_` (`函数` is `_U51FD__U6570_`), a leading digit gets a `_` in
    front, and an empty name is `empty`. Symbols that collide are told apart by the caller."""
    out = []
    for char in name:
        if char in _SYMBOL_CHARS:
            out.append(char)
        elif char.isascii():
            out.append("_")
        else:
            out.append(f"_U{ord(char):X}_")
    text = "".join(out)
    if not text:
        return empty
    return f"_{text}" if text[0].isdigit() else text


def check_logical_layout(type_: TensorType, what: str) -> None:
    """SFEP §3.7 / DESIGN §6: StableHLO has no physical layout, so only the default row-major
    order (or no layout) is expressible here; a value sharded over devices belongs to the SPMD
    exit (a cta-mesh value is its global value here, `is_on_one_device`)."""
    layout = type_.layout
    if layout is None or is_on_one_device(layout):
        return
    if isinstance(layout, ShardLayout):
        raise UnsupportedError(
            f"StableHLO exit: {what} is sharded ({layout.attrs}); the single-device exit takes "
            "unsharded programs (use the SPMD exit for meshes)"
        )
    if isinstance(layout, Layout) and (layout.stride is None or _is_row_major(layout)):
        return
    raise UnsupportedError(
        f"StableHLO exit: {what} has physical layout {layout}, which is not the logical "
        "row-major order and cannot be expressed in StableHLO; insert a transpose or reshard "
        "to the default layout before this exit"
    )


def _is_row_major(layout: Layout) -> bool:
    """C-order over the layout's positions, a nested mode being factors of its axis (the
    canonical regroup, semantic-analysis §3.1). A size-1 position is never stepped, so its
    stride addresses nothing (Reshard's per-instance form writes 0 there)."""
    extents, strides = flatten(layout.shape), flatten(layout.stride)
    if not all(is_static(d) for d in (*extents, *strides)):
        return False
    running = 1
    for extent, stride in zip(reversed(extents), reversed(strides), strict=True):
        if extent != 1 and stride != running:
            return False
        running *= int(extent)
    return True


def tensor_type(type_: TensorType, bindings: Mapping[Any, int] | None = None) -> str:
    dims = "x".join(str(d) for d in static_shape(type_, bindings))
    elem = element_type(type_.dtype)
    return f"tensor<{dims}x{elem}>" if dims else f"tensor<{elem}>"


def flat_types(type_: Type, bindings: Mapping[Any, int] | None = None) -> list[str]:
    """The StableHLO types a value of `type_` occupies: tuples are flattened, depth first."""
    if isinstance(type_, TupleType):
        return [t for field in type_.fields for t in flat_types(field, bindings)]
    if isinstance(type_, TensorType):
        return [tensor_type(type_, bindings)]
    raise UnsupportedError(f"StableHLO exit: values of type {type_} have no StableHLO form")


def scalar_literal(value: Any, dtype: DType) -> str:
    """A scalar as a dense-attribute element: exact bit patterns for non-finite floats."""
    if dtype.is_bool:
        return "true" if bool(value) else "false"
    if not dtype.is_float:
        return str(int(value))
    number = float(value)
    if math.isfinite(number):
        text = repr(number)  # shortest round-trip decimal; MLIR's float literal needs a '.'
        if "." not in text:
            text = text.replace("e", ".0e") if "e" in text else f"{text}.0"
        return text
    bits = np.array(number, dtype=np.dtype(dtype.to_numpy())).view(_uint_of(dtype))
    width = dtype.bits // 4
    return f"0x{int(bits):0{width}X}"


def _uint_of(dtype: DType) -> np.dtype:
    return np.dtype({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[dtype.bits])


def dense_literal(array: np.ndarray, dtype: DType) -> str:
    """`dense<...>` for a numpy array: a splat when every element is equal (all-NaN counts, though
    NaN != NaN), else nested lists."""
    values = np.asarray(array)
    flat = values.reshape(-1)
    if flat.size and np.all((flat == flat[0]) | ((flat != flat) & (flat[0] != flat[0]))):
        return f"dense<{scalar_literal(flat[0], dtype)}>"
    if values.ndim == 0:
        return f"dense<{scalar_literal(values.item(), dtype)}>"

    def nested(a: np.ndarray) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(scalar_literal(v, dtype) for v in a.tolist()) + "]"
        return "[" + ", ".join(nested(sub) for sub in a) + "]"

    return f"dense<{nested(values)}>"
