"""What a PALLAS rule receives as `kx`: jax's array namespaces plus the few kernel helpers.

Op modules may not import jax (DESIGN §5: the core imports without it), so their PALLAS rules get
`jnp`, `lax` and `pl` through this object, built only when the Pallas exit runs. The helpers
are the ones several rules share: the numerics of `compute_in_f32` (narrow floats widened to f32,
rounded once to the result dtype, as the reference kernels do), and the indexing forms — windows,
static slices, gathers, window writes, reversals, concatenations, stacks, pads and a CTA's block
of a replicated value. Of a kernel Ref they read only what they need (`pl.ds`, gather-loads).
Of a value in registers on the GPU path (`gpu`) they write what Triton lowers, which has none of
gather, slice, rev, pad, dynamic_slice or dynamic_update_slice of a value and joins only pairs:
equal splits and stacks where the pieces are equal (no arithmetic), an exact selection
(`pick`) otherwise. Interpreted without a GPU backend, the direct jnp forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import InternalCompilerError, UnsupportedError
from tilefoundry.exits.pallas.gpu import GPU_REGISTER_ELEMENTS
from tilefoundry.ir.types import DType


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
    writes what the GPU lowerings have rules for (no gather, slice, rev, pad, dynamic_slice or
    dynamic_update_slice of a value in registers, no concatenate / stack but of pairs);
    interpreted without a backend, the direct jnp forms."""

    def __init__(self, gpu: bool = False) -> None:
        import jax.numpy as jnp
        from jax import lax
        from jax.experimental import pallas as pl

        self.jnp, self.lax, self.pl = jnp, lax, pl
        self.gpu = gpu
        self.calling = ""
        """The op whose rule is being traced (set by KernelBody), named by a refusal of a helper
        that is not told its op."""

    def scope(self, name: str) -> Any:
        """A named scope: the primitives traced inside it carry `name` on their name stack."""
        import jax

        return jax.named_scope(name)

    def dtype(self, dtype: DType) -> Any:
        """The numpy dtype jnp computes `dtype` in."""
        return dtype.to_numpy()

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

    def maximum(self, a: Any, b: Any) -> Any:
        """jnp.maximum, whose NaN propagates on a GPU backend too: Triton lowers a float max as
        `maxnumf` (jax's Triton lowering), which returns the other operand of a NaN, while the
        reference (numpy, StableHLO) returns NaN."""
        return self._nan_kept(self.jnp.maximum(a, b), a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        """jnp.minimum, NaN propagated on a GPU backend too (Triton's `minnumf`, as `maximum`)."""
        return self._nan_kept(self.jnp.minimum(a, b), a, b)

    def max(self, x: Any, axis: Any, keepdims: bool = False) -> Any:
        """jnp.max over `axis`, a NaN anywhere in the reduced elements giving NaN on a GPU
        backend too (Triton reduces with `maxnumf`)."""
        jnp = self.jnp
        result = jnp.max(x, axis=axis, keepdims=keepdims)
        if not (self.gpu and jnp.issubdtype(x.dtype, jnp.floating)):
            return result
        nans = jnp.sum(jnp.where(jnp.isnan(x), 1, 0), axis=axis, keepdims=keepdims)  # no any
        return jnp.where(nans > 0, jnp.asarray(jnp.nan, result.dtype), result)

    def _nan_kept(self, result: Any, a: Any, b: Any) -> Any:
        jnp = self.jnp
        if not (self.gpu and jnp.issubdtype(result.dtype, jnp.floating)):
            return result
        return jnp.where(jnp.isnan(a) | jnp.isnan(b), a + b, result)  # a + b: NaN, in the dtype

    def check_registers(self, what: str, shape: Sequence[int], fix: str) -> None:
        """Refuse a GPU form whose intermediate of `shape` (`what`: the form, for the message)
        would not stay in registers (`GPU_REGISTER_ELEMENTS`): Triton would spill it to local
        memory, and the form is only worth writing while it does not. Named by the op being
        traced (`calling`)."""
        size = int(np.prod(shape))
        if size > GPU_REGISTER_ELEMENTS:
            raise UnsupportedError(
                f"{self.calling}: on a GPU backend {what} is a {tuple(shape)} intermediate ({size} "
                f"elements), more than the {GPU_REGISTER_ELEMENTS} a CTA keeps in registers; "
                f"{fix}"
            )

    def matmul(self, a: Any, b: Any) -> Any:
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
            f"a matmul of {tuple(a.shape)} x {tuple(b.shape)} as a multiply reduced over K (its "
            "dot takes two 2-D tiles of 16 or more along each dim)",
            (*batch, m, k, n),
            "give each CTA a 2-D matmul of 16 or more along every dim (the batch dims over the "
            "cta mesh), or run it on XLA (run_xla)",
        )
        if floats:
            a, b = a.astype(jnp.float32), b.astype(jnp.float32)
        return jnp.sum(jnp.expand_dims(a, -1) * jnp.expand_dims(b, -3), axis=-2)

    def window(self, value: Any, axis: int, start: Any, size: int, blocks: int = 1) -> Any:
        """`size` elements of `value` along `axis` from `start` in each of `blocks` equal blocks
        of the axis, the start clamped into `[0, block - size]` as StableHLO's dynamic_slice (and
        the reference kernel) clamp it. A Ref is read through `pl.ds` (one block) or one
        gather-load (several), so only the window is loaded; a value on a GPU, which lowers no
        dynamic_slice of a value in registers, by selection (`read_at`)."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        length = shape[axis] // blocks
        start = lax.clamp(0, jnp.asarray(start, jnp.int32), length - size)
        if isinstance(value, KernelRef) and blocks == 1:
            return value.ref[_along(len(shape), axis, self.pl.ds(start, size), slice(None))]
        if isinstance(value, KernelRef):
            place = lax.broadcasted_iota(jnp.int32, _line(len(shape), axis, blocks * size), axis)
            block, offset = lax.div(place, size), lax.rem(place, size)
            return self.read_at(value, _along(len(shape), axis, block * length + start + offset))
        view = value.reshape((*shape[:axis], blocks, length, *shape[axis + 1 :]))
        if self.gpu:
            rank = len(view.shape)
            place = lax.broadcasted_iota(jnp.int32, _line(rank, axis + 1, size), axis + 1)
            picked = self.read_at(view, _along(rank, axis + 1, start + place))
        else:
            picked = lax.dynamic_slice_in_dim(view, start, size, axis + 1)
        return picked.reshape((*shape[:axis], blocks * size, *shape[axis + 1 :]))

    def static_window(self, value: Any, index: tuple[slice, ...]) -> Any:
        """`value[index]` (static slices, one per leading axis): of a Ref, only the window is
        read (a load). A value on a GPU, which lowers no `slice` of a value, is cut without
        arithmetic where the window is aligned (a stride that divides the axis: a reshape and a
        `split`; a run of `count` elements from a multiple of `count`: a `split`), by selection
        (`read_at`) otherwise."""
        if isinstance(value, KernelRef):
            return value.ref[index]
        if not self.gpu:
            return value[index]
        for axis, cut in enumerate(index):
            value = self._static_axis(value, axis, *cut.indices(value.shape[axis]))
        return value

    def _static_axis(self, value: Any, axis: int, start: int, stop: int, step: int) -> Any:
        jnp, shape = self.jnp, value.shape
        extent, count = shape[axis], len(range(start, stop, step))
        if count == extent:
            return value
        if step > 1 and extent % step == 0:
            rows = value.reshape((*shape[:axis], extent // step, step, *shape[axis + 1 :]))
            column = jnp.split(rows, step, axis=axis + 1)[start % step]
            return self._static_axis(
                jnp.squeeze(column, axis + 1), axis, start // step, start // step + count, 1
            )
        if step == 1 and count and start % count == 0 and extent % count == 0:
            return jnp.split(value, extent // count, axis=axis)[start // count]
        place = self.lax.broadcasted_iota(jnp.int32, _line(value.ndim, axis, count), axis)
        return self.read_at(value, _along(value.ndim, axis, start + step * place))

    def block(self, value: Any, axis: int, index: Any, count: int) -> Any:
        """Block `index` (runtime) of `count` equal blocks of `value` along `axis`: a CTA's block
        of a replicated value. A Ref is read through `pl.ds`. A value computed in the kernel has
        no dynamic slice on a GPU (neither Triton nor Mosaic GPU lowers `dynamic_slice` of a
        value in registers), so its blocks are laid on a new axis and selected (`pick`)."""
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
        """Along `axis`, the one element of `values` where `mask` holds (exactly one does), bit
        for bit: the others' bits zeroed and the bits summed as integers (one nonzero addend, so
        exact for every value, -0.0, infinities and NaN payloads included). Not a max over the
        others masked to -inf: Triton's max is `maxnumf`, which drops a NaN."""
        return _from_bits(self.jnp, self.lax, self._bits(mask, values, axis), values.dtype)

    def _bits(self, mask: Any, values: Any, axis: int) -> Any:
        """The integer bits of `values` where `mask` holds, summed along `axis` (0 where it
        holds nowhere, so picks from disjoint candidates add up)."""
        jnp = self.jnp
        bits = _to_bits(jnp, self.lax, values)
        return jnp.sum(jnp.where(mask, bits, 0), axis=axis, dtype=bits.dtype)

    def _bits_at(self, values: Any, axis: int, positions: Any) -> Any:
        """`_bits` of `values` read at `positions` along `axis` (dropped): `positions` has extent
        1 there and broadcasts against `values`, so the candidates are the result's size times
        the axis's extent, which must stay in registers (`check_registers`)."""
        jnp = self.jnp
        shape = jnp.broadcast_shapes(values.shape, positions.shape)
        self.check_registers(
            "a selection (the result times the extent it selects from, with its mask and bits)",
            shape,
            "use smaller tiles (a result times source extent of at most "
            f"{GPU_REGISTER_ELEMENTS}), or run the program on XLA (run_xla)",
        )
        mask = self.lax.broadcasted_iota(jnp.int32, shape, axis) == positions
        return self._bits(mask, jnp.broadcast_to(values, shape), axis)

    def take(self, value: Any, index: Any, axis: int, batch_dims: int = 0) -> Any:
        """`value` read at `index` along `axis`, the index's axes replacing it (numpy `take`;
        with `batch_dims`, the leading axes of both index each other, as Gather's), each index
        clamped into the axis (`read_at`; a value on a GPU: one selection along the axis)."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        index = self.load(index).astype(jnp.int32)
        looked_up = index.shape[batch_dims:]
        between, after = (1,) * (axis - batch_dims), (1,) * (len(shape) - 1 - axis)
        if self.gpu and not isinstance(value, KernelRef):
            at = jnp.clip(index, 0, shape[axis] - 1)
            lined = value.reshape((*shape[:axis], *(1,) * len(looked_up), *shape[axis:]))
            positions = at.reshape((*index.shape[:batch_dims], *between, *looked_up, 1, *after))
            found = self._bits_at(lined, axis + len(looked_up), positions)
            return _from_bits(jnp, lax, found, value.dtype)
        rank = len(shape) - 1 + len(looked_up)
        positions = []
        for a, extent in enumerate(shape):
            if a == axis:
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
        shape), each clamped into its axis as StableHLO's gather clamps; None reads the axis
        whole, in order. Of a Ref this is a single gather-load (the one form of gather Triton
        lowers); of a value jnp's gather, or on a GPU one selection per positioned axis, which
        needs each position array to vary along its own axis only (as windows, reversals and
        pads read)."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        clamped = [
            None if p is None else jnp.clip(jnp.asarray(p).astype(jnp.int32), 0, extent - 1)
            for p, extent in zip(positions, shape, strict=True)
        ]
        if self.gpu and not isinstance(value, KernelRef):
            for axis, at in enumerate(clamped):
                if at is not None and any(e != 1 for b, e in enumerate(at.shape) if b != axis):
                    raise InternalCompilerError(
                        f"read_at: the positions of axis {axis} vary along other axes too "
                        f"({tuple(at.shape)}), which one selection per axis cannot read"
                    )
                if at is not None:
                    lined = jnp.expand_dims(value, axis)
                    found = self._bits_at(lined, axis + 1, jnp.expand_dims(at, axis + 1))
                    value = _from_bits(jnp, lax, found, value.dtype)
            return value
        full = tuple(
            lax.broadcasted_iota(jnp.int32, _line(len(shape), a, e), a) if p is None else p
            for a, (p, e) in enumerate(zip(clamped, shape, strict=True))
        )
        return (value.ref if isinstance(value, KernelRef) else value)[full]

    def zero_filled_window(self, value: Any, windows: Sequence[Any], what: str, fix: str) -> Any:
        """`value` read along each axis a at `start + step * o` for o < count (`windows[a]` =
        (start, step, count); None: the axis whole), zero where a position falls outside the
        axis (a convolution's padding). Not read_at with a fill: read_at clamps as a gather
        does, so its per-axis GPU selection (`pick`) of a value cannot tell a padding position
        from the edge it clamps to. A Ref is one gather-load at the clamped positions (read_at),
        masked to zero outside: an array of the window's size, whatever the axis's extent. A
        value on a GPU, which lowers no gather, slice or pad of a value, is selected along each
        windowed axis from a broadcast over every position of it (a masked sum: a padding
        position matches none, so it is zero; NaN and infinities survive it, a -0.0 becomes
        +0.0), refused (`what`, `fix`) where that broadcast would not stay in
        registers; off the GPU, jnp's gather masked as a Ref's."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        if self.gpu and not isinstance(value, KernelRef):
            for axis, window in enumerate(windows):
                if window is not None:
                    value = self._selected_window(value, axis, *window, what, fix)
            return value
        positions, inside = [], jnp.bool_(True)
        for axis, window in enumerate(windows):
            if window is None:
                positions.append(None)
                continue
            start, step, count = window
            at = lax.broadcasted_iota(jnp.int32, _line(len(shape), axis, count), axis)
            at = at * step + start
            inside = inside & (at >= 0) & (at < shape[axis])
            positions.append(at)
        read = self.read_at(value, positions)
        return jnp.where(inside, read, jnp.zeros((), read.dtype))

    def _selected_window(
        self, value: Any, axis: int, start: int, step: int, count: int, what: str, fix: str
    ) -> Any:
        jnp, lax = self.jnp, self.lax
        shape = (*value.shape[:axis], count, *value.shape[axis:])
        self.check_registers(
            f"{what} along axis {axis} (a selection from every input position)", shape, fix
        )
        wanted = lax.broadcasted_iota(jnp.int32, shape, axis) * step + start
        read = wanted == lax.broadcasted_iota(jnp.int32, shape, axis + 1)
        candidates = jnp.broadcast_to(jnp.expand_dims(value, axis), shape)
        return jnp.sum(jnp.where(read, candidates, jnp.zeros((), value.dtype)), axis=axis + 1)

    def write_window(
        self,
        dst: Any,
        update: Any,
        starts: list,
        counts: list | None = None,
        strides: Sequence[int] | None = None,
    ) -> Any:
        """`dst` with `update` written from `starts` (a runtime start per axis; None: the axis
        written whole), `counts[a]` elements along axis a (by default update's extent) every
        `strides[a]` positions (by default 1). As a selection: a position of the window reads
        update at its offset there (`read_at`, so a gather-load of update's Ref when it is a gmem
        parameter), the others keep dst; no `dynamic_update_slice`, which no GPU lowering has
        for a value. Interpreted off the GPU, a dense window of a value update is jax's
        dynamic_update_slice (the starts must keep the window inside dst, which it clamps)."""
        jnp, lax = self.jnp, self.lax
        dst = self.load(dst)
        rank = dst.ndim
        strides = strides or (1,) * rank
        dense = counts is None and set(strides) == {1}
        if not self.gpu and dense and not isinstance(update, KernelRef):
            zero = jnp.int32(0)
            at = [zero if s is None else jnp.asarray(s, jnp.int32) for s in starts]
            return lax.dynamic_update_slice(dst, update.astype(dst.dtype), at)
        extents = _shape(update) if counts is None else counts
        inside, positions = True, []
        for axis, (start, count, step) in enumerate(zip(starts, extents, strides, strict=True)):
            if start is None:
                positions.append(None)
                continue
            offset = lax.broadcasted_iota(jnp.int32, _line(rank, axis, dst.shape[axis]), axis)
            offset = offset - start
            here = offset >= 0
            if step > 1:
                here = here & (lax.rem(offset, step) == 0)
                offset = lax.div(offset, step)
            inside = inside & here & (offset < count)
            positions.append(offset)
        written = self.read_at(update, positions).astype(dst.dtype)
        return jnp.where(inside, written, dst)

    def reverse(self, value: Any, axes: Sequence[int]) -> Any:
        """`value` with the order along `axes` reversed. A Ref: one gather-load at the reversed
        positions (Triton has no `rev`, but loads at computed offsets). A value on a GPU: each
        axis (a power of two, as Triton's are) viewed as binary digits, the two halves of each
        digit swapped (a `split` and a `stack`, no arithmetic; any other extent by selection,
        which the GPU checks then refuse for its size); off the GPU, jnp's flip."""
        jnp, lax = self.jnp, self.lax
        shape = _shape(value)
        if not self.gpu and not isinstance(value, KernelRef):
            return jnp.flip(value, axes)
        odd = [a for a in axes if shape[a] & (shape[a] - 1)]
        if isinstance(value, KernelRef) or odd:
            positions = [None] * len(shape)
            for axis in axes:
                place = lax.broadcasted_iota(jnp.int32, _line(len(shape), axis, shape[axis]), axis)
                positions[axis] = shape[axis] - 1 - place
            return self.read_at(value, positions)
        for axis in axes:
            digits = shape[axis].bit_length() - 1
            bits = value.reshape((*shape[:axis], *(2,) * digits, *shape[axis + 1 :]))
            for digit in range(axis, axis + digits):
                low, high = jnp.split(bits, 2, axis=digit)
                bits = self.concat([high, low], digit)
            value = bits.reshape(shape)
        return value

    def concat(self, values: Sequence[Any], axis: int) -> Any:
        """`values` joined along `axis`. On a GPU, whose Triton joins only two `[..., 1]` pieces:
        equal pieces are stacked (`stack`) and the new axis merged (no arithmetic); unequal ones
        are each selected into place and their bits added (`_bits_at`: every position is one
        piece's)."""
        jnp, lax = self.jnp, self.lax
        if not self.gpu:
            return jnp.concatenate(tuple(values), axis=axis)
        extents = [v.shape[axis] for v in values]
        first = values[0].shape
        if len(set(extents)) == 1:
            stacked = self.stack(values, axis)
            return stacked.reshape((*first[:axis], len(values) * extents[0], *first[axis + 1 :]))
        total = sum(extents)
        place = lax.broadcasted_iota(jnp.int32, _line(len(first), axis, total), axis)
        found, begin = None, 0
        for piece, extent in zip(values, extents, strict=True):
            at = jnp.expand_dims(place - begin, axis + 1)
            bits = self._bits_at(jnp.expand_dims(piece, axis), axis + 1, at)
            found = bits if found is None else found + bits
            begin += extent
        return _from_bits(jnp, lax, found, values[0].dtype)

    def stack(self, values: Sequence[Any], axis: int) -> Any:
        """`values` joined along a new `axis`. On a GPU, whose Triton stacks only two pieces on a
        new last axis: a tree of such pairs (a power-of-two count, as Triton's sizes are), the
        new axis then moved into place (no arithmetic)."""
        jnp = self.jnp
        if not self.gpu or len(values) & (len(values) - 1):
            return jnp.stack(tuple(values), axis=axis)
        return jnp.moveaxis(_stack_last(jnp, list(values)), -1, axis)

    def pad(self, value: Any, fill: Any, paddings: Sequence[tuple[int, int, int]]) -> Any:
        """`lax.pad` (low, high, interior per axis; a negative edge crops). On a GPU, which has
        no `pad`, `value` written into a `fill` array every interior + 1 positions from low
        (`write_window`)."""
        jnp, lax = self.jnp, self.lax
        if not self.gpu:
            return lax.pad(value, fill, [tuple(p) for p in paddings])
        shape = tuple(
            low + high + extent + max(extent - 1, 0) * interior
            for (low, high, interior), extent in zip(paddings, value.shape, strict=True)
        )
        starts = [jnp.int32(low) for low, _, _ in paddings]
        steps = [interior + 1 for _, _, interior in paddings]
        return self.write_window(jnp.full(shape, fill, value.dtype), value, starts, None, steps)

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


def _to_bits(jnp, lax, values: Any) -> Any:
    """`values` as integers that add exactly: a float's bit pattern, a bool as 0 / 1."""
    if values.dtype == jnp.bool_:
        return values.astype(jnp.int8)
    if jnp.issubdtype(values.dtype, jnp.integer):
        return values
    return lax.bitcast_convert_type(values, np.dtype(f"int{8 * values.dtype.itemsize}"))


def _from_bits(jnp, lax, bits: Any, dtype) -> Any:
    if dtype == jnp.bool_:
        return bits != 0
    if jnp.issubdtype(dtype, jnp.integer):
        return bits
    return lax.bitcast_convert_type(bits, dtype)


def _stack_last(jnp, pieces: list) -> Any:
    """`pieces` on a new last axis from pairs only: the even and the odd pieces stacked apart,
    then paired (`[..., q, r]` is piece 2q + r) and the two last axes merged."""
    if len(pieces) == 1:
        return jnp.expand_dims(pieces[0], -1)
    if len(pieces) == 2:
        return jnp.stack(pieces, axis=-1)
    evens, odds = _stack_last(jnp, pieces[0::2]), _stack_last(jnp, pieces[1::2])
    return jnp.stack([evens, odds], axis=-1).reshape((*evens.shape[:-1], len(pieces)))


def _line(rank: int, axis: int, extent: int) -> tuple[int, ...]:
    """The shape of an array that varies along `axis` only."""
    return (1,) * axis + (extent,) + (1,) * (rank - axis - 1)


def _along(rank: int, axis: int, at: Any, other: Any = None) -> tuple:
    """`at` at `axis`, `other` at every other axis (an index or a positions list)."""
    return tuple(at if a == axis else other for a in range(rank))


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(value.ref.shape if isinstance(value, KernelRef) else value.shape)
