"""Several meshes over one device set: their common refinement, read by every engine.

A program may view the same devices through more than one mesh, e.g. `make_mesh((8,), ("tp",))`
and `make_mesh((2, 4), ("x", "y"))`. Both lay their coordinates out row-major over the same
device ids (DESIGN §4.13), so each mesh axis is a run of "digits" of the device id: `tp` is the
whole id, `x` its high digit of extent 2, `y` its low digit of extent 4. The common refinement
is the mesh whose axes are the finest digits every view is made of (here `(2, 4)`); each axis of
each view is a consecutive run of refinement axes (its *cover*), so a Split, Partial or
collective over a view's axes is the same over its cover. A value moving between two views is
then an ordinary Reshard on the refinement: the plan (`reshard_plan`) reads both types there.

Views that do not share one device set (different topologies or device counts), or whose digits
do not nest (`(2, 3)` and `(3, 2)`: no refinement has both a 2-digit and a 3-digit boundary that
divide), have no common refinement and are refused naming both meshes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from math import prod

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.types import Type
from tilefoundry.ir.types.shard import Layout, Mesh, ShardLayout
from tilefoundry.ir.types.shard.int_tuple import is_int
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.sharding.shard_reading import Splits, canonical_splits, pending_partials


@dataclass(frozen=True)
class Refinement:
    """The common refinement `mesh` of `views`, and per view the refinement axes each of its
    axes covers (outermost first)."""

    mesh: Mesh
    covers: dict[Mesh, tuple[tuple[int, ...], ...]]

    def axes(self, view: Mesh, mesh_axes: Sequence[int]) -> tuple[int, ...]:
        """The refinement axes `mesh_axes` of `view` cover, in the same (major to minor) order."""
        return tuple(r for m in mesh_axes for r in self.covers[view][m])

    def splits(self, type_: Type, where: str, engine: str) -> Splits:
        """`canonical_splits` of `type_`, in refinement axes."""
        splits = canonical_splits(type_, where, engine)
        if not splits:
            return {}
        view = type_.layout.mesh
        return {axis: self.axes(view, axes) for axis, axes in splits.items()}

    def partials(self, type_: Type) -> dict[int, str]:
        """`pending_partials` of `type_`, in refinement axes (a Partial over a view axis is
        pending over every refinement axis it covers)."""
        pending = pending_partials(type_)
        if not pending:
            return {}
        view = type_.layout.mesh
        return {r: red for m, red in pending.items() for r in self.covers[view][m]}


def _describe(meshes: Sequence[Mesh]) -> str:
    return " and ".join(repr(m) for m in meshes)


def _row_major(mesh: Mesh) -> bool:
    layout = mesh.layout
    return (
        all(is_int(e) for e in mesh.shape)
        and isinstance(layout, Layout)
        and layout.stride in (None, c_order_strides(mesh.shape))
    )


def mesh_of(type_: Type) -> Mesh | None:
    layout = getattr(type_, "layout", None)
    return layout.mesh if isinstance(layout, ShardLayout) else None


def refine(meshes: Sequence[Mesh], where: str, engine: str) -> Refinement:
    """The common refinement of `meshes` (one mesh refines to itself, names kept)."""
    views = list(dict.fromkeys(meshes))
    if len(views) == 1:
        (only,) = views
        return Refinement(only, {only: tuple((m,) for m in range(only.rank))})
    why = None
    if len({v.topologies for v in views}) != 1:
        why = "they are not views of one device set (different topologies or device counts)"
    elif not all(_row_major(v) for v in views):
        why = "a view is not a static row-major mesh, so its devices are not digits of one id"
    if why is None:
        # A view's axis boundaries are the strides of its row-major layout (plus the size).
        size = prod(views[0].shape)
        bounds = sorted({s for v in views for s in c_order_strides(v.shape)} | {size})
        if any(b % a for a, b in pairwise(bounds)):
            why = "their axes do not nest (no finer mesh has every axis of both as a run of axes)"
    if why is not None:
        raise UnsupportedError(
            f"{where}: the meshes {_describe(views)} have no common refinement: {why}; "
            f"{engine} moves values only between views of one device set whose axes nest"
        )
    extents = tuple(b // a for a, b in pairwise(bounds))[::-1]
    strides = c_order_strides(extents)
    covers: dict[Mesh, tuple[tuple[int, ...], ...]] = {}
    names: list[str | None] = [None] * len(extents)
    for view in views:
        axes = []
        for m, (stride, extent) in enumerate(
            zip(c_order_strides(view.shape), view.shape, strict=True)
        ):
            covered = tuple(r for r, s in enumerate(strides) if stride <= s < stride * extent)
            axes.append(covered)
            if view.names and len(covered) == 1 and names[covered[0]] is None:
                names[covered[0]] = view.names[m]
        covers[view] = tuple(axes)
    taken: set[str] = set()
    final = []
    for r, name in enumerate(names):
        label = name if name is not None and name not in taken else f"d{r}"
        taken.add(label)
        final.append(label)
    mesh = Mesh(views[0].topologies, Layout(extents, strides), tuple(final))
    return Refinement(mesh, covers)
