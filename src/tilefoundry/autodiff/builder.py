"""The builder a VJP rule writes its backward ops with (`ad` in every rule).

A rule spells its backward program in the DSL's own ops, `ad.tf.matmul(ct, ad.tf.transpose(w))`,
and each Call is built and typed by the surface builder the frontend uses, so the backward program
is typed by exactly the forward's typeinfer and shard-propagation rules: a cotangent's sharding is
derived, never annotated. Every backward Call carries the source span of the forward Call it
differentiates, so a refusal in the backward points at the user's line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from tilefoundry.analysis import TypeInferContext, describe
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.frontend.calls import build_surface_call
from tilefoundry.ir.core import Constant, Expr, Metadata, source_span
from tilefoundry.ir.types import StorageKind, TensorType
from tilefoundry.ir.types.shard import B, Layout, Partial, ShardLayout
from tilefoundry.rules import surface_entry
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials


class _Ops:
    """`ad.tf.<name>(...)`: the DSL namespace, building typed Calls located at the forward op."""

    def __init__(self, builder: Builder):
        self._builder = builder

    def __getattr__(self, name: str):
        entry = surface_entry(name)
        if entry is None:
            raise AttributeError(f"ad.tf: unknown op '{name}'")
        builder = self._builder
        return lambda *args, **kwargs: build_surface_call(
            entry, args, kwargs, ctx=builder.ctx, metadata=builder.metadata
        )


class Builder:
    """What a VJP rule may build, located at the forward Call `call` it differentiates."""

    def __init__(self, ctx: TypeInferContext, call: Expr | None = None):
        self.ctx = ctx
        self.call = call
        span = source_span(call)
        self.metadata: tuple[Metadata, ...] = () if span is None else (span,)
        self.tf = _Ops(self)

    def at(self, call: Expr) -> Builder:
        """The same builder, located at another forward node."""
        return Builder(self.ctx, call)

    # ---- values a rule needs -----------------------------------------------------------------

    def scalar(self, value: float, like: Expr) -> Constant:
        """A rank-0 literal in `like`'s dtype (HIR never promotes)."""
        dtype = like.type.dtype
        literal = np.asarray(value, dtype=dtype.to_numpy())
        return Constant(literal, TensorType((), dtype, storage=StorageKind.UMAT), self.metadata)

    def zeros_like(self, value: Expr) -> Expr:
        """A zero of `value`'s shape and dtype, in `value`'s complete state (split where it is
        split: a Reshard of a replicated zero to a Split is a local slice, no communication), so
        an op that needs matching Splits on its operands accepts it next to `value`."""
        type_ = value.type
        zeros = self.tf.zeros(tuple(type_.shape), type_.dtype)
        layout = type_.layout
        if not isinstance(layout, ShardLayout) or all(a == B for a in layout.attrs):
            return zeros
        attrs = tuple(B if isinstance(a, Partial) else a for a in layout.attrs)
        return self.reshard(zeros, ShardLayout(layout.layout, attrs, layout.mesh))

    def zeros_of(self, type_: TensorType) -> Expr:
        """A zero of exactly `type_` (its layout a local slice of a replicated zero)."""
        shape, layout = tuple(type_.shape), type_.layout
        if isinstance(layout, ShardLayout):
            return self.reshard(self.tf.zeros(shape, type_.dtype), layout, type_.storage)
        return self.tf.zeros(shape, type_.dtype, storage=type_.storage)

    def sum_to(self, cotangent: Expr, shape: Sequence[Any]) -> Expr:
        """The transpose of torch broadcasting `shape` up to `cotangent`'s shape: sum over the
        leading axes broadcasting added and over the size-1 axes it stretched.

        Each leading axis (a batch, typically) is summed as a contraction with ones, like a
        matmul weight's gradient, so a split batch leaves a pending sum that the transform
        completes where the cotangent is read, rather than an all-reduce here. One axis at a
        time: merging a split leading axis with the axes after it keeps its Split the outermost
        factor (the canonical layout every exit reads); an unsplit one is reduced in place."""
        tf = self.tf
        shape = tuple(shape)
        have = tuple(cotangent.type.shape)
        if have == shape:
            return cotangent
        lead = len(have) - len(shape)
        for _ in range(lead):
            extent, rest = cotangent.type.shape[0], tuple(cotangent.type.shape[1:])
            if 0 not in canonical_splits(cotangent.type, "sum_to", "reverse mode"):
                # an unsplit leading axis sums locally; merging it over a later split axis
                # would split an inner factor, which a device mesh refuses (hir/tensor/reshape)
                cotangent = tf.reduce(cotangent, axes=(0,), keepdim=False, kind="sum")
                continue
            rows = tf.reshape(cotangent, (extent, math.prod(rest)))
            ones = tf.broadcast_to(self.scalar(1.0, cotangent), (extent,))
            cotangent = tf.reshape(tf.matmul(ones, rows), rest)
        stretched = tuple(i for i, e in enumerate(shape) if e == 1 and have[lead + i] != 1)
        if stretched:
            cotangent = tf.reduce(cotangent, axes=stretched, keepdim=True, kind="sum")
        return cotangent

    def axis_last(self, value: Expr, axis: int) -> Expr:
        """`value` with `axis` moved to the end (the others keep their order), for a rule whose
        backward op works along the last axis; `axis_back` undoes it."""
        order = _last_order(axis, value.type.rank)
        return self.tf.transpose(value, order) if order != tuple(range(len(order))) else value

    def axis_back(self, value: Expr, axis: int) -> Expr:
        """The inverse of `axis_last`: the last axis of `value` moved back to `axis`."""
        order = _last_order(axis, value.type.rank)
        if order == tuple(range(len(order))):
            return value
        return self.tf.transpose(value, tuple(order.index(a) for a in range(len(order))))

    def complete(self, value: Expr) -> Expr:
        """`value` with every pending reduction completed to Broadcast (an all-reduce): for a rule
        that must read a value a Partial cannot be read as."""
        layout = value.type.layout
        pending = pending_partials(value.type)
        if not pending:
            return value
        attrs = tuple(B if axis in pending else a for axis, a in enumerate(layout.attrs))
        return self.reshard(value, ShardLayout(Layout(layout.shape), attrs, layout.mesh))

    def replicated(self, value: Expr) -> Expr:
        """`value` whole on every device (pending sums all-reduced, splits all-gathered): for a
        rule whose op accepts fewer operand states than the forward op did (a gather of indices
        that a scatter_add took split)."""
        layout = value.type.layout
        if not isinstance(layout, ShardLayout) or all(a == B for a in layout.attrs):
            return value
        attrs = (B,) * layout.mesh.rank
        return self.reshard(value, ShardLayout(Layout(layout.shape), attrs, layout.mesh))

    def accepted(self, build: Callable[..., Expr], *operands: Expr) -> Expr:
        """`build(*operands)` in the operands' own states where the op's typing accepts them,
        else from their replicated forms: for a cotangent op that takes fewer operand states
        than the forward op did (a contraction over a split channel, a regroup that would leave
        a strided share). Typeinfer decides, so which states an op takes is stated once, in its
        rule, not again here."""
        try:
            return build(*operands)
        except VerifyError:
            return build(*(self.replicated(value) for value in operands))

    def reshard(self, value: Expr, layout: ShardLayout, storage: StorageKind | None = None) -> Expr:
        """`value` moved to `layout` (the collective its type change implies); a umat value is
        staged in gmem, the one storage a Reshard may target without further context."""
        current = value.type.storage
        if storage is None:
            storage = StorageKind.GMEM if current == StorageKind.UMAT else current
        return self.tf.reshard(value, layout=layout, storage=storage)

    # ---- refusals ----------------------------------------------------------------------------

    def refuse(self, what: str, fix: str) -> NoReturn:
        """An UnsupportedError naming the forward op, what reverse mode cannot do, and the fix,
        located at the forward op's line."""
        raise UnsupportedError(
            f"{describe(self.call)}: {what}; {fix}", location=source_span(self.call)
        )

    def located(self, err: VerifyError) -> VerifyError:
        return err.with_location(source_span(self.call))


def _last_order(axis: int, rank: int) -> tuple[int, ...]:
    axis %= rank
    return (*(a for a in range(rank) if a != axis), axis)


def is_float_tensor(type_: Any) -> bool:
    return isinstance(type_, TensorType) and type_.dtype.is_float
