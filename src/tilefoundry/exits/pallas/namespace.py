"""What a PALLAS rule receives as `kx`: jax's array namespaces plus the few kernel helpers.

Op modules may not import jax (DESIGN §5: the core imports without it), so their PALLAS rules get
`jnp`, `lax` and `pl` through this object, built only when the Pallas exit runs. The helpers
are the ones several rules share: the numerics of `compute_in_f32` (narrow floats widened to f32,
rounded once to the result dtype, as the reference kernels do) and a clamped window that reads a
kernel Ref through `pl.ds` or slices a value already in the kernel.
"""

from __future__ import annotations

from typing import Any

from tilefoundry.ir.types import DType


class KernelRef:
    """A gmem parameter's block inside the kernel, not yet loaded: a rule that reads refs can
    load only a window of it; every other rule gets it loaded whole."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any):
        self.ref = ref


class KernelNamespace:
    """`kx` of a PALLAS rule; one per lowering (jax is imported on construction)."""

    def __init__(self) -> None:
        import jax.numpy as jnp
        from jax import lax
        from jax.experimental import pallas as pl

        self.jnp, self.lax, self.pl = jnp, lax, pl

    def dtype(self, dtype: DType) -> Any:
        """The numpy dtype jnp computes `dtype` in."""
        return dtype.to_numpy()

    def is_ref(self, value: Any) -> bool:
        return isinstance(value, KernelRef)

    def load(self, value: Any) -> Any:
        """A Ref's whole block as an array; an array as it is."""
        return value.ref[...] if isinstance(value, KernelRef) else value

    def in_f32(self, fn, out_dtype: DType, *arrays: Any) -> Any:
        """`fn` on operands widened to f32 when they are narrower floats, rounded once to
        `out_dtype` (the reference kernels' `compute_in_f32`)."""
        jnp = self.jnp
        widened = [
            a.astype(jnp.float32)
            if jnp.issubdtype(a.dtype, jnp.floating) and a.dtype.itemsize < 4
            else a
            for a in (jnp.asarray(x) for x in arrays)
        ]
        return jnp.asarray(fn(*widened)).astype(self.dtype(out_dtype))

    def window(self, value: Any, axis: int, start: Any, size: int) -> Any:
        """`size` elements of `value` along `axis` from `start`, the start clamped into
        `[0, extent - size]` as StableHLO's dynamic_slice (and the reference kernel) clamp it.
        A Ref is read through `pl.ds`, so only the window is loaded."""
        shape = value.ref.shape if isinstance(value, KernelRef) else value.shape
        extent = shape[axis]
        start = self.lax.clamp(0, self.jnp.asarray(start, self.jnp.int32), extent - size)
        if isinstance(value, KernelRef):
            index = tuple(
                self.pl.ds(start, size) if i == axis else slice(None) for i in range(len(shape))
            )
            return value.ref[index]
        return self.lax.dynamic_slice_in_dim(value, start, size, axis)

    def scalar_start(self, start: Any, scale: int, offset: int) -> Any:
        """`scale * start + offset` of a rank-0 (or all-ones) integer start, as int32."""
        position = self.jnp.reshape(self.load(start), ()).astype(self.jnp.int32)
        return position * scale + offset
