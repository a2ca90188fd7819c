"""Where the backward program communicates: the transform's Reshards (DESIGN §4.18).

Cotangent shardings are derived by the rules; the transform adds a Reshard only where a cotangent
must change state, and that Reshard is the collective (`show` prints it):

- a rule reads a completed cotangent: before a value's rule runs, each mesh axis on which its
  cotangent still pends a sum is completed *into the primal's state there* (a Split primal: a
  reduce-scatter; a replicated or plain one: an all-reduce), and a primal that is itself pending a
  sum gets a replicated cotangent (every addend's cotangent is the whole cotangent), gathering a
  split one. Nothing else moves: a split cotangent of a replicated value stays split (reading it
  is free; gathering it would not be). Reshard's own rule is the one exception: its transpose is
  the identity on the global value, so its pending cotangent passes to its input and is completed
  there, in the input's state (the transpose of an all-gather is one reduce-scatter);
- two contributions of one value that the add rule cannot add in their own types are brought to
  the cheaper common state first (`addable`);
- a returned parameter gradient takes its parameter's type (`parameter_gradient`), or, with
  `reduce_gradients=False`, keeps every pending sum pending (zero collectives for a data-parallel
  weight) and otherwise takes the parameter's type.
"""

from __future__ import annotations

from tilefoundry.autodiff.builder import Builder
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Expr
from tilefoundry.ir.types import StorageKind, TensorType
from tilefoundry.ir.types.shard import B, Layout, Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.sharding.shard_reading import pending_partials


def _sugar(layout: ShardLayout, attrs: tuple) -> ShardLayout:
    """`attrs` over `layout`'s positions with strides left to the Reshard (the sugar form)."""
    return ShardLayout(Layout(layout.layout.shape), attrs, layout.mesh)


def _same_positions(a: ShardLayout, b: ShardLayout) -> bool:
    return a.mesh == b.mesh and flatten(a.layout.shape) == flatten(b.layout.shape)


def cotangent_layout(primal: TensorType) -> ShardLayout | None:
    """The state a cotangent of `primal` may always be brought to: the primal's own, with each
    pending reduction replaced by Broadcast (None for a plain primal)."""
    layout = primal.layout
    if not isinstance(layout, ShardLayout):
        return None
    attrs = tuple(B if isinstance(a, Partial) else a for a in layout.attrs)
    return ShardLayout(layout.layout, attrs, layout.mesh)


def _completed_attrs(cotangent: ShardLayout, primal: TensorType) -> tuple | None:
    """Per mesh axis, the cotangent's state after `settled` (None: no such attrs over the
    cotangent's own positions, so the primal's cotangent layout is used instead)."""
    source = primal.layout if isinstance(primal.layout, ShardLayout) else None
    if source is not None and not _same_positions(cotangent, source):
        return None
    attrs = []
    for axis, attr in enumerate(cotangent.attrs):
        held = source.attrs[axis] if source is not None else B
        if isinstance(attr, Partial) or (isinstance(held, Partial) and isinstance(attr, Split)):
            attr = held if isinstance(held, Split) else B
        attrs.append(attr)
    splits = [a.axis for a in attrs if isinstance(a, Split)]
    return tuple(attrs) if len(splits) == len(set(splits)) else None


def settled(cotangent: Expr, primal: TensorType, ad: Builder) -> Expr:
    """`cotangent` as a rule may read it (see the module doc)."""
    layout = cotangent.type.layout
    if not isinstance(layout, ShardLayout):
        return cotangent
    source = primal.layout if isinstance(primal.layout, ShardLayout) else None
    pending = pending_partials(cotangent.type)
    gathers = source is not None and any(
        isinstance(held, Partial) and isinstance(attr, Split)
        for held, attr in zip(source.attrs, layout.attrs, strict=False)
    )
    if not pending and not gathers:
        return cotangent
    attrs = _completed_attrs(layout, primal)
    target = _sugar(layout, attrs) if attrs is not None else cotangent_layout(primal)
    return ad.reshard(cotangent, target, _storage(primal))


def addable(a: Expr, b: Expr, primal: TensorType, ad: Builder) -> tuple[Expr, Expr]:
    """Two contributions brought to states the add rule accepts: each settled first (a pending
    sum completed where the other is not pending it), and when that is not enough both moved to
    the primal's cotangent layout."""
    a, b = settled(a, primal, ad), settled(b, primal, ad)
    try:
        ad.tf.add(a, b)
    except VerifyError:
        target = cotangent_layout(primal)
        if target is None:
            raise
        a, b = (ad.reshard(x, target, _storage(primal)) for x in (a, b))
    return a, b


def parameter_gradient(
    cotangent: Expr, param: TensorType, ad: Builder, *, reduce_gradients: bool
) -> Expr:
    """The returned gradient of a parameter of type `param` (see the module doc). A plain
    parameter's gradient is complete: replicated on the mesh it was computed on, the same global
    value (a Reshard cannot leave a mesh)."""
    layout = cotangent.type.layout
    target = param.layout
    if not isinstance(target, ShardLayout):
        if not isinstance(layout, ShardLayout):
            return cotangent
        if reduce_gradients or not pending_partials(cotangent.type):
            target = ShardLayout(Layout(layout.layout.shape), (B,) * layout.mesh.rank, layout.mesh)
            return cotangent if layout == target else ad.reshard(cotangent, target, _storage(param))
        return cotangent
    if any(isinstance(a, Partial) for a in target.attrs):
        target = cotangent_layout(param)
    if not reduce_gradients and isinstance(layout, ShardLayout):
        pending = pending_partials(cotangent.type)
        if pending and _same_positions(layout, target):
            attrs = tuple(
                Partial(pending[axis]) if axis in pending else a
                for axis, a in enumerate(target.attrs)
            )
            if len({a.axis for a in attrs if isinstance(a, Split)}) == sum(
                isinstance(a, Split) for a in attrs
            ):
                target = ShardLayout(target.layout, attrs, target.mesh)
    if layout == target:
        return cotangent
    return ad.reshard(cotangent, target, _storage(param))


def _storage(primal: TensorType) -> StorageKind:
    return StorageKind.GMEM if primal.storage == StorageKind.UMAT else primal.storage
