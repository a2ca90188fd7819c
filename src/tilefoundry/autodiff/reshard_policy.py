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
  the cheaper common state first (`added`: a pending sum next to a split one is reduce-scattered
  into that Split, not all-reduced);
- a returned parameter gradient takes its parameter's type (`parameter_gradient`), or, with
  `reduce_gradients=False`, keeps every pending sum pending (zero collectives for a data-parallel
  weight) and otherwise takes the parameter's type.

A cotangent a rule reads is also staged in its primal's storage (its layout unchanged): the
transpose of a storage move is the move back, so a tile loop's register accumulator hands the
gmem product it sums a gmem cotangent.

States are compared per mesh axis on *logical* axes (which logical axis a Split cuts), so two
values whose layouts factor the same tensor differently still compare; a target is built as the
canonical layout of its states (the form every exit reads).
"""

from __future__ import annotations

from tilefoundry.autodiff.builder import Builder
from tilefoundry.errors import InternalCompilerError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Expr
from tilefoundry.ir.types import StorageKind, TensorType
from tilefoundry.ir.types.shard import B, Layout, Mesh, Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.ir.types.shard.shard_layout import canonical_shard_layout
from tilefoundry.sharding.shard_reading import axis_splits, pending_partials

States = tuple
"""Per mesh axis: Split(logical axis), B, or Partial(reduction)."""


def cotangent_layout(primal: TensorType) -> ShardLayout | None:
    """The state a cotangent of `primal` may always be brought to: the primal's own, with each
    pending reduction replaced by Broadcast (None for a plain primal)."""
    layout = primal.layout
    if not isinstance(layout, ShardLayout):
        return None
    attrs = tuple(B if isinstance(a, Partial) else a for a in layout.attrs)
    return ShardLayout(layout.layout, attrs, layout.mesh)


def value_states(type_: TensorType) -> States | None:
    """A sharded `type_`'s state per axis of its own mesh (see `_states`)."""
    return _states(type_, type_.layout.mesh)


def _states(type_: TensorType, mesh: Mesh) -> States | None:
    """`type_`'s state per axis of `mesh` (all B for a plain type, None when it lives on another
    mesh or a Split factors no single logical axis)."""
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        return (B,) * mesh.rank
    if layout.mesh != mesh:
        return None
    try:
        splits = axis_splits(type_, "reverse mode", "the transform", inner_factors=True)
    except UnsupportedError:
        return None
    states = [B if a == B else a for a in layout.attrs]
    for logical_axis, split in splits.items():
        for mesh_axis in split.mesh_axes:
            states[mesh_axis] = Split(logical_axis)
    return tuple(states)


def _moved(value: Expr, states: States, fallback: ShardLayout | None, storage, ad: Builder):
    """`value` resharded to the canonical layout of `states` (to `fallback` when no such
    layout exists, e.g. an extent the mesh does not divide); `value` itself when unchanged."""
    layout = value.type.layout
    if _states(value.type, layout.mesh) == states:
        return value
    try:
        target = canonical_shard_layout(tuple(value.type.shape), layout.mesh, states)
    except VerifyError:
        if fallback is None:
            raise
        target = fallback
    return ad.reshard(value, target, storage)


def _staged(value: Expr, storage: StorageKind, ad: Builder) -> Expr:
    """`value` moved to `storage`, keeping its layout. hir Reshard: a storage change names its
    layout; a plain value's is its C-order one, written out (a umat constant has no storage
    direction for the sugar to read), which types as the plain value again."""
    shape = tuple(value.type.shape)
    layout = value.type.layout or Layout(shape, c_order_strides(shape))
    return ad.tf.reshard(value, layout=layout, storage=storage)


def settled(cotangent: Expr, primal: TensorType, ad: Builder) -> Expr:
    """`cotangent` as a rule may read it (see the module doc), staged in its primal's storage
    (a carry's cotangent in registers reaching the gmem product the carry accumulates)."""
    if cotangent.type.storage != _storage(primal):
        cotangent = _staged(cotangent, _storage(primal), ad)
    layout = cotangent.type.layout
    if not isinstance(layout, ShardLayout):
        return cotangent
    have = _states(cotangent.type, layout.mesh)
    held = _states(primal, layout.mesh)
    if have is None or held is None:
        if not pending_partials(cotangent.type):
            return cotangent
        return ad.reshard(cotangent, _fallback(cotangent, primal), _storage(primal))
    wanted = []
    for attr, primal_attr in zip(have, held, strict=True):
        if isinstance(attr, Partial) or (isinstance(primal_attr, Partial) and attr != B):
            attr = primal_attr if isinstance(primal_attr, Split) else B
        wanted.append(attr)
    return _moved(cotangent, tuple(wanted), _fallback(cotangent, primal), _storage(primal), ad)


def _fallback(cotangent: Expr, primal: TensorType) -> ShardLayout:
    """The primal's cotangent layout, or (a plain primal) the cotangent's own mesh replicated."""
    target = cotangent_layout(primal)
    if target is not None:
        return target
    layout = cotangent.type.layout
    states = (B,) * layout.mesh.rank
    return canonical_shard_layout(tuple(cotangent.type.shape), layout.mesh, states)


def added(a: Expr, b: Expr, primal: TensorType, ad: Builder) -> Expr:
    """The sum of two contributions to a value of type `primal`: in their own types when the
    add rule accepts them; else with each pending sum completed into the other contribution's
    state there (a reduce-scatter into its Split, an all-reduce where it is replicated: the
    cheaper completion); else both moved to the primal's cotangent layout."""
    try:
        return ad.tf.add(a, b)
    except VerifyError:
        pass
    try:
        return ad.tf.add(_completed_toward(a, b, primal, ad), _completed_toward(b, a, primal, ad))
    except VerifyError:
        target = cotangent_layout(primal)
        if target is None:
            raise
    return ad.tf.add(*(ad.reshard(x, target, _storage(primal)) for x in (a, b)))


def _completed_toward(value: Expr, other: Expr, primal: TensorType, ad: Builder) -> Expr:
    """`value` with each sum it pends (and `other` does not) completed into `other`'s state on
    that mesh axis (`settled` where the two cannot be compared)."""
    if not pending_partials(value.type):
        return value
    mesh = value.type.layout.mesh
    have, toward = _states(value.type, mesh), _states(other.type, mesh)
    if have is None or toward is None:
        return settled(value, primal, ad)
    wanted = tuple(
        (t if isinstance(t, Split) else B) if isinstance(h, Partial) and h != t else h
        for h, t in zip(have, toward, strict=True)
    )
    return _moved(value, wanted, _fallback(value, primal), _storage(primal), ad)


def parameter_gradient(
    cotangent: Expr, param: TensorType, ad: Builder, *, reduce_gradients: bool
) -> Expr:
    """The returned gradient of a parameter of type `param` (see the module doc). A plain
    parameter's gradient is complete: replicated on the mesh it was computed on, the same global
    value (a Reshard cannot leave a mesh). A pending parameter's gradient is replicated there."""
    layout = cotangent.type.layout
    if not isinstance(layout, ShardLayout):
        return cotangent
    replicated = (B,) * layout.mesh.rank
    if param.layout is None and _states(cotangent.type, layout.mesh) == replicated:
        return cotangent
    target = cotangent_layout(param) or _fallback(cotangent, param)
    pending = pending_partials(cotangent.type) if not reduce_gradients else {}
    if pending:
        have, wanted = _states(cotangent.type, layout.mesh), _states(param, layout.mesh)
        if have is not None and wanted is not None:
            states = tuple(
                have[axis] if axis in pending else (B if isinstance(w, Partial) else w)
                for axis, w in enumerate(wanted)
            )
            return _moved(cotangent, states, target, _storage(param), ad)
    if layout == target:
        return cotangent
    return ad.reshard(cotangent, target, _storage(param))


def cotangent_type(primal: TensorType) -> TensorType:
    """The one type a cotangent of `primal` takes where a type must be fixed in advance (a loop
    carry's cotangent, a stacked gradient): the primal's own, pending sums replaced by
    Broadcast, in the primal's storage (gmem for an unmaterialised primal)."""
    return TensorType(primal.shape, primal.dtype, cotangent_layout(primal), _storage(primal))


def conformed(value: Expr, want: TensorType, ad: Builder) -> Expr:
    """`value` (of `want`'s shape and dtype) brought to exactly the type `want`: pending sums
    completed and splits moved by the Reshard to `want`'s layout (the collective), or, for a
    plain `want`, the value made whole on every device and read as the one global value (a
    reshape of a fully replicated value is plain, DESIGN §4.7); then staged in `want`'s storage."""
    if value.type == want:
        return value
    if isinstance(want.layout, ShardLayout):
        value = ad.reshard(value, want.layout, want.storage)
    elif isinstance(value.type.layout, ShardLayout):
        value = ad.tf.reshape(ad.replicated(value), tuple(want.shape))
    if value.type.storage != want.storage:
        value = _staged(value, want.storage, ad)
    if value.type != want:
        raise InternalCompilerError(
            f"reverse mode: a value of type {value.type} cannot be given the type {want}"
        )
    return value


def _storage(primal: TensorType) -> StorageKind:
    return StorageKind.GMEM if primal.storage == StorageKind.UMAT else primal.storage
