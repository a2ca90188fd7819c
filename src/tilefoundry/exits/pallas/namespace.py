"""What a PALLAS rule receives as `kx`: jax's array namespaces plus the few kernel helpers.

Op modules may not import jax (DESIGN §5: the core imports without it), so their PALLAS rules get
`jnp`, `lax` and `pl` through this object, built only when the Pallas exit runs. The helpers
are the ones several rules share: the numerics of `compute_in_f32` (narrow floats widened to f32,
rounded once to the result dtype, as the reference kernels do), a clamped window that reads a
kernel Ref through `pl.ds` or slices a value already in the kernel, and a CTA's block of a
replicated value, cut without a dynamic slice (which no GPU lowering has for a value in registers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import DType

GPU_REGISTER_ELEMENTS = 16384
"""The largest intermediate (elements) a GPU form of an op builds (a masked broadcast, a product
before its reduction): a quarter of an SM's 65,536 32-bit registers, 64 per thread at 8 warps,
which leaves the rest of the register file (at most 255 registers a thread) to the operands,
the accumulator and the rest of the kernel. Above it the form is refused, not spilled."""


class KernelRef:
    """A gmem parameter's block inside the kernel, not yet loaded: a rule that reads refs can
    load only a window of it; every other rule gets it loaded whole."""

    __slots__ = ("ref",)

    def __init__(self, ref: Any):
        self.ref = ref


class KernelNamespace:
    """`kx` of a PALLAS rule; one per lowering (jax is imported on construction).

    `gpu`: the kernel is traced for a GPU backend (compiled, or interpreted with a backend named
    so that a CPU run executes exactly what the GPU would). A rule, or a helper here, then
    writes what the GPU lowerings have rules for (no gather, dynamic_slice, dynamic_update_slice
    or slice of a value in registers); interpreted without a backend, the direct jnp forms."""

    def __init__(self, gpu: bool = False) -> None:
        import jax.numpy as jnp
        from jax import lax
        from jax.experimental import pallas as pl

        self.jnp, self.lax, self.pl = jnp, lax, pl
        self.gpu = gpu

    def scope(self, name: str) -> Any:
        """A named scope: the primitives traced inside it carry `name` on their name stack."""
        import jax

        return jax.named_scope(name)

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

    def check_registers(self, where: str, what: str, shape: Sequence[int], fix: str) -> None:
        """Refuse a GPU form whose intermediate of `shape` (`what`: the form, for the message)
        would not stay in registers (`GPU_REGISTER_ELEMENTS`): Triton would spill it to local
        memory, and the form is only worth writing while it does not."""
        size = int(np.prod(shape))
        if size > GPU_REGISTER_ELEMENTS:
            raise UnsupportedError(
                f"{where}: on a GPU backend {what} is a {tuple(shape)} intermediate ({size} "
                f"elements), more than the {GPU_REGISTER_ELEMENTS} a CTA keeps in registers; "
                f"{fix}"
            )

    def matmul(self, where: str, a: Any, b: Any) -> Any:
        """`[.., M, K] @ [.., K, N]` (batch dims broadcast) as a GPU backend lowers it, floats
        accumulated in f32 at full f32 precision (the reference kernel's): Triton's dot where it
        takes the operands (two 2-D tiles, each dim at least 16, none unsigned; a rhs without
        batch dims takes the lhs's batch merged into its rows), otherwise a broadcast multiply
        reduced over K, refused where that product would not stay in registers."""
        jnp = self.jnp
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        (m, k), n = a.shape[-2:], b.shape[-1]
        floats = jnp.issubdtype(a.dtype, jnp.floating)
        accumulate = jnp.float32 if floats else None
        if b.ndim == 2 or int(np.prod(batch)) == 1:
            rows = a.reshape((-1, k))
            if min(rows.shape[0], k, n) >= 16 and a.dtype.kind != "u":
                product = jnp.matmul(
                    rows,
                    b.reshape((k, n)),
                    precision=self.lax.Precision.HIGHEST,
                    preferred_element_type=accumulate,
                )
                return product.reshape((*batch, m, n))
        self.check_registers(
            where,
            f"a matmul of {tuple(a.shape)} x {tuple(b.shape)} as a multiply reduced over K (its "
            "dot takes two 2-D tiles of 16 or more along each dim)",
            (*batch, m, k, n),
            "give each CTA a 2-D matmul of 16 or more along every dim (the batch dims over the "
            "cta mesh), or run it on XLA (run_xla)",
        )
        if floats:
            a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        return jnp.sum(jnp.expand_dims(a, -1) * jnp.expand_dims(b, -3), axis=-2)

    def window(self, value: Any, axis: int, start: Any, size: int) -> Any:
        """`size` elements of `value` along `axis` from `start`, the start clamped into
        `[0, extent - size]` as StableHLO's dynamic_slice (and the reference kernel) clamp it.
        A Ref is read through `pl.ds`, so only the window is loaded."""
        shape = _shape(value)
        extent = shape[axis]
        start = self.lax.clamp(0, self.jnp.asarray(start, self.jnp.int32), extent - size)
        if isinstance(value, KernelRef):
            index = tuple(
                self.pl.ds(start, size) if i == axis else slice(None) for i in range(len(shape))
            )
            return value.ref[index]
        return self.lax.dynamic_slice_in_dim(value, start, size, axis)

    def static_window(self, value: Any, index: tuple[slice, ...]) -> Any:
        """`value[index]` (static slices, one per leading axis): of a Ref, only the window is
        read (a load, where a GPU lowering has no `slice` of a value)."""
        return value.ref[index] if isinstance(value, KernelRef) else value[index]

    def block(self, value: Any, axis: int, index: Any, count: int) -> Any:
        """Block `index` (runtime) of `count` equal blocks of `value` along `axis`: a CTA's block
        of a replicated value. A Ref is read through `pl.ds`. A value computed in the kernel has
        no dynamic slice on a GPU (neither Triton nor Mosaic GPU lowers `dynamic_slice` of a
        value in registers), so its blocks are laid on a new axis and the others masked to the
        dtype's lowest value before a max over that axis (`pick`)."""
        if count == 1:
            return value
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        size = shape[axis] // count
        if isinstance(value, KernelRef):
            window = self.pl.ds(index * size, size)
            return value.ref[tuple(window if i == axis else slice(None) for i in range(len(shape)))]
        blocks = value.reshape((*shape[:axis], count, size, *shape[axis + 1 :]))
        return self.pick(lax.broadcasted_iota(jnp.int32, blocks.shape, axis) == index, blocks, axis)

    def pick(self, mask: Any, values: Any, axis: int) -> Any:
        """Along `axis`, the one element of `values` where `mask` holds (exactly one does),
        exactly: the others masked to the dtype's lowest value before a max (the max of x and
        -inf is x, -0.0 and NaN included); for bools, an any."""
        jnp = self.jnp
        if values.dtype == jnp.bool_:
            return jnp.any(mask & values, axis=axis)
        return jnp.max(jnp.where(mask, values, _lowest(jnp, values.dtype)), axis=axis)

    def take(self, value: Any, index: Any, axis: int, batch_dims: int = 0) -> Any:
        """`value` read at `index` along `axis`, the index's axes replacing it (numpy `take`;
        with `batch_dims`, the leading axes of both index each other, as Gather's), each index
        clamped into the axis (`read_at`)."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        index = self.load(index).astype(jnp.int32)
        looked_up = index.shape[batch_dims:]
        rank = len(shape) - 1 + len(looked_up)
        positions = []
        for a, extent in enumerate(shape):
            if a == axis:
                between, after = (1,) * (axis - batch_dims), (1,) * (len(shape) - 1 - axis)
                positions.append(
                    index.reshape((*index.shape[:batch_dims], *between, *looked_up, *after))
                )
                continue
            at = a if a < axis else a + len(looked_up) - 1
            along = (1,) * at + (extent,) + (1,) * (rank - at - 1)
            positions.append(lax.broadcasted_iota(jnp.int32, along, at))
        return self.read_at(value, positions)

    def read_at(self, value: Any, positions: list) -> Any:
        """`value[p0, p1, ...]`: one integer array per axis (broadcast together to the result's
        shape), each clamped into its axis as StableHLO's gather clamps. Of a Ref this is a single
        gather-load (the one form of gather Triton lowers), of a value jnp's gather."""
        jnp = self.jnp
        clamped = tuple(
            jnp.clip(p.astype(jnp.int32), 0, extent - 1)
            for p, extent in zip(positions, _shape(value), strict=True)
        )
        return (value.ref if isinstance(value, KernelRef) else value)[clamped]

    def write_window(self, dst: Any, update: Any, starts: list, counts: list | None = None) -> Any:
        """`dst` with `update` written from `starts` (a runtime start per axis), `counts[a]`
        positions along axis a (by default update's extent), as a selection: a position inside
        the window reads update at its offset there (`read_at`, so a gather-load of update's Ref
        when it is a gmem parameter), the others keep dst. No `dynamic_update_slice`, which no
        GPU lowering has for a value."""
        jnp, lax = self.jnp, self.lax
        dst = self.load(dst)
        extents = _shape(update) if counts is None else counts
        inside, positions = None, []
        for axis, (start, count) in enumerate(zip(starts, extents, strict=True)):
            offset = lax.broadcasted_iota(jnp.int32, dst.shape, axis) - start
            here = (offset >= 0) & (offset < count)
            inside = here if inside is None else inside & here
            positions.append(offset)
        return jnp.where(inside, self.read_at(update, positions), dst)

    def vector(self, values: Sequence[Any], dtype: DType) -> Any:
        """A rank-1 array of `values` (Python numbers or rank-0 arrays) built by selection
        against an iota: a constant array would be captured by the kernel, which `pallas_call`
        refuses, and a concatenate of scalars no GPU lowering has."""
        jnp = self.jnp
        positions = self.lax.broadcasted_iota(jnp.int32, (len(values),), 0)
        vector = jnp.zeros((len(values),), self.dtype(dtype))
        for i, value in enumerate(values):
            vector = jnp.where(positions == i, jnp.reshape(value, ()).astype(vector.dtype), vector)
        return vector

    def scalar_start(self, start: Any, scale: int, offset: int) -> Any:
        """`scale * start + offset` of a rank-0 (or all-ones) integer start, as int32."""
        position = self.jnp.reshape(self.load(start), ()).astype(self.jnp.int32)
        return position * scale + offset


def _lowest(jnp, dtype) -> Any:
    """The value no element of `dtype` is below: -inf where the dtype has it, else its minimum."""
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.iinfo(dtype).min
    if np.isinf(np.asarray(np.inf, np.float32).astype(dtype)):
        return -np.inf
    return jnp.finfo(dtype).min


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.ref.shape if isinstance(value, KernelRef) else value.shape)
