"""Layout sugar: the objects `N @ m.a` and `{m.a @ P("sum")}` evaluate to, and their layouts.

Annotations are ordinary Python evaluated when the `def` runs (DESIGN §3), so the sugar must build
real, hashable objects before any decorator sees the function. They are deliberately unchecked
records: checking happens in `layout_from_sugar`, which the frontend calls with the source node
at hand, so a bad `12 @ m.y` is reported at its line instead of as a location-less error raised
while Python evaluates the annotation.

Deviation from DESIGN §3 (`N @ (m.a, m.b)`): in an annotation Python evaluates `int @ tuple`
itself and raises TypeError before any decorator runs, so no object of ours can intervene. The
multi-axis spelling that works everywhere is `N @ (m.a * m.b)` (`MeshAxis.__mul__` builds an
ordered `AxisGroup`); the frontend also accepts the tuple form where it reads the AST itself
(layout arguments inside a function body, e.g. `tf.reshard(x, layout=(8 @ (m.a, m.b), 4))`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import prod
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.dims import is_shape_dim, normalize_dim
from tilefoundry.ir.types.shard.layout import Layout, LayoutBase
from tilefoundry.ir.types.shard.mesh import Mesh, MeshAxis, c_order_strides
from tilefoundry.ir.types.shard.shard_layout import (
    B,
    Broadcast,
    Partial,
    ShardLayout,
    Split,
    factor_sugar,
    shared_strides,
    with_strides,
)

AbstractSet = set | frozenset
"""A value-state set is a Python set when evaluated directly, a frozenset once normalised."""


@dataclass(frozen=True)
class AxisGroup:
    """`m.a * m.b`: an ordered group of mesh axes that split one logical axis together."""

    axes: tuple[Any, ...]

    def __mul__(self, other: Any) -> AxisGroup:
        return AxisGroup((*self.axes, *axes_of(other)))

    def __rmatmul__(self, extent: Any) -> SplitSugar:
        return SplitSugar(extent, self.axes)


@dataclass(frozen=True)
class SplitSugar:
    """`extent @ axes`: one logical axis of `extent`, split over `axes` in the given order."""

    extent: Any
    axes: tuple[Any, ...]


@dataclass(frozen=True)
class ValueStateSugar:
    """`m.a @ P("sum")`: a pending-reduction state on one mesh axis (inside the trailing set)."""

    axis: Any
    state: Any


def axes_of(value: Any) -> tuple[Any, ...]:
    """The axes a `*` operand contributes to a group (a MeshAxis or another group)."""
    if isinstance(value, AxisGroup):
        return value.axes
    if isinstance(value, MeshAxis):
        return (value,)
    raise VerifyError(f"layout sugar: {value!r} is not a mesh axis; group mesh axes as m.a * m.b")


def _axis_name(axis: MeshAxis) -> str:
    return f"m.{axis.name}" if axis.name is not None else f"m.axes[{axis.index}]"


@dataclass
class _Builder:
    """Accumulates layout positions, their mesh bindings and the mesh they all belong to."""

    extents: list
    strides: list | None
    logical: list
    bound: dict  # mesh axis index -> ShardAttr
    mesh: Mesh | None = None

    def use_mesh(self, axis: Any, where: str) -> MeshAxis:
        if not isinstance(axis, MeshAxis):
            raise VerifyError(
                f"layout sugar: {where} uses {axis!r}, which is not a mesh axis; take axes "
                "from a mesh (m.a or m.axes[i])"
            )
        if self.mesh is None:
            self.mesh = axis.mesh
        elif axis.mesh != self.mesh:
            raise VerifyError(
                f"layout sugar: {where} uses {axis.label} of {axis.mesh!r}, but the layout "
                f"already binds {self.mesh!r}; one layout is sharded over one mesh"
            )
        if axis.index in self.bound:
            raise VerifyError(
                f"layout sugar: {axis.label} is already bound in this layout; bind each mesh "
                "axis once"
            )
        return axis

    def add_axis(self, item: Any, stride: Any) -> None:
        if isinstance(item, SplitSugar):
            self._add_split(item, stride)
            return
        if isinstance(item, ValueStateSugar | AbstractSet):
            raise VerifyError(
                "layout sugar: a value state m.a @ P(...) belongs in the set {...} that is the "
                "last outer item of the layout"
            )
        if not is_shape_dim(item):
            raise VerifyError(
                f"layout sugar: axis {item!r} must be an extent (int or DimVar) or N @ m.a"
            )
        extent = normalize_dim(item, what="layout sugar extent")
        self.logical.append(extent)
        self.extents.append(extent)
        if self.strides is not None:
            self.strides.append(stride)

    def _add_split(self, item: SplitSugar, stride: Any) -> None:
        if not is_shape_dim(item.extent):
            raise VerifyError(f"layout sugar: {item.extent!r} @ ... needs an int or DimVar extent")
        extent = normalize_dim(item.extent, what="layout sugar extent")
        axes = tuple(self.use_mesh(a, f"{extent} @ ...") for a in item.axes)
        if not axes:
            raise VerifyError(f"layout sugar: {extent} @ () names no mesh axis")
        parts = factor_sugar(extent, axes if len(axes) > 1 else axes[0])
        self.logical.append(extent)
        for size, axis in parts:
            if axis is not None:
                self.bound[axis.index] = Split(len(self.extents))
            self.extents.append(size)
        if self.strides is not None:
            sizes = [size for size, _ in parts]
            for j in range(len(parts)):
                inner = prod(sizes[j + 1 :]) if sizes[j + 1 :] else 1
                self.strides.append(stride * inner if inner != 1 else stride)

    def add_state(self, item: Any) -> None:
        if not isinstance(item, ValueStateSugar):
            raise VerifyError(
                f"layout sugar: the value-state set holds m.a @ P(reduction) entries, got {item!r}"
            )
        axis = self.use_mesh(item.axis, "a value state")
        state = item.state
        if isinstance(state, Broadcast):
            raise VerifyError(
                f"layout sugar: {_axis_name(axis)} @ B is never written; an unmentioned mesh "
                "axis is Broadcast, so drop it"
            )
        if not isinstance(state, Partial):
            raise VerifyError(
                f"layout sugar: {_axis_name(axis)} @ {state!r} is not a value state; only "
                'P("sum"|"max"|"min") goes in the set (write a split as N @ m.a)'
            )
        self.bound[axis.index] = state


def layout_from_sugar(items: Iterable[Any]) -> tuple[tuple, LayoutBase | None]:
    """The logical shape and layout a shape slot spells (parser §1.5, shard §7.1.1).

    Forms: bare extents and `N @ m.a` / `N @ (m.a * m.b)` axes, or the verbose
    `((axes...), (strides...))`; either may end with a value-state set `{m.a @ P("sum")}`.
    Sugar strides stay None (un-materialised, shard §7.1.2); verbose strides are kept, each
    factored axis getting C-order strides within its written stride. No mesh axis means a plain
    tensor: layout None, or a plain `Layout` for verbose strides.
    """
    items = tuple(items)
    states: Any = ()
    if items and isinstance(items[-1], AbstractSet):
        states, items = items[-1], items[:-1]
    for item in items:
        if isinstance(item, AbstractSet):
            raise VerifyError(
                "layout sugar: the value-state set {m.a @ P(...)} must be the last outer item"
            )
    verbose = any(isinstance(item, tuple) for item in items)
    if verbose:
        if len(items) != 2 or not all(isinstance(item, tuple) for item in items):
            raise VerifyError(
                "layout sugar: explicit strides are written ((axes...), (strides...)); "
                f"got {items!r}"
            )
        axes, strides = items
        if len(axes) != len(strides):
            raise VerifyError(
                f"layout sugar: {len(axes)} axes but {len(strides)} strides in "
                f"({axes!r}, {strides!r}); give one stride per written axis"
            )
    else:
        axes, strides = items, None
    builder = _Builder([], None if strides is None else [], [], {})
    for index, item in enumerate(axes):
        stride = None if strides is None else strides[index]
        if strides is not None and not is_shape_dim(stride):
            raise VerifyError(f"layout sugar: stride {stride!r} must be an int or dim")
        builder.add_axis(item, stride)
    for item in sorted(states, key=repr):
        builder.add_state(item)
    logical = tuple(builder.logical)
    layout_strides = None if builder.strides is None else tuple(builder.strides)
    if builder.mesh is None:
        if layout_strides is None:
            return logical, None
        return logical, Layout(tuple(builder.extents), layout_strides)
    attrs = tuple(builder.bound.get(index, B) for index in range(builder.mesh.rank))
    layout = ShardLayout(Layout(tuple(builder.extents), layout_strides), attrs, builder.mesh)
    return logical, layout


def materialize_strides(layout: LayoutBase | None) -> LayoutBase | None:
    """hir §1.1: a signature layout without strides gets C-order strides over its global shape."""
    sharded = isinstance(layout, ShardLayout) and isinstance(layout.layout, Layout)
    if sharded and layout.layout.stride is None:
        return with_strides(layout, shared_strides(layout))
    if isinstance(layout, Layout) and layout.stride is None and isinstance(layout.shape, tuple):
        return Layout(layout.shape, c_order_strides(layout.shape))
    return layout
