"""Shard attributes and `ShardLayout`, the binding of a layout's domain axes to mesh axes.

Seed shard §6–§7 with the readings of DESIGN §4.3/§4.4. Two index spaces meet here and are kept
apart by name: a *layout position* `k` indexes `flatten(layout.shape)` (what `Split(k)` means inside
a ShardLayout, seed §7.1.1) and a *logical axis* indexes the tensor's `TensorType.shape` (what
`Split(i)` means only in `canonical_shard_layout`'s input, DESIGN §3). A *mesh axis* `a` is a
position in `attrs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product as cartesian
from math import prod
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.shard.int_tuple import (
    flatten,
    is_int,
    is_static,
    is_tuple,
    is_value,
    same_value,
    unflatten,
)
from tilefoundry.ir.types.shard.layout import (
    INJECTIVITY_ENUMERATION_LIMIT,
    Layout,
    LayoutBase,
)
from tilefoundry.ir.types.shard.mesh import Mesh, MeshAxis, c_order_strides

REDUCTIONS = ("sum", "max", "min")


class ShardAttr:
    """What one mesh axis does to a value (seed §6): the base of Split/Broadcast/Dynamic/Partial."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, repr=False)
class Split(ShardAttr):
    """The mesh axis is bound to layout position `axis` (a logical axis only in canonical input)."""

    axis: int

    def __post_init__(self) -> None:
        if not is_int(self.axis):
            raise VerifyError(f"Split: axis must be an int, got {self.axis!r}")

    def __repr__(self) -> str:
        return f"S({self.axis})"


@dataclass(frozen=True, slots=True, repr=False)
class Broadcast(ShardAttr):
    """The value is replicated across the mesh axis."""

    def __call__(self) -> Broadcast:
        raise VerifyError("Broadcast: B is already the Broadcast attr; write B, not B()")

    def __repr__(self) -> str:
        return "B"


@dataclass(frozen=True, slots=True, repr=False)
class Dynamic(ShardAttr):
    """The distribution along the mesh axis is not resolved yet (analysis-only, seed §6)."""

    def __repr__(self) -> str:
        return "D"


@dataclass(frozen=True, slots=True, repr=False)
class Partial(ShardAttr):
    """Per-shard addends whose `reduction` over the mesh axis is the real value (seed §6)."""

    reduction: str = "sum"

    def __post_init__(self) -> None:
        if self.reduction not in REDUCTIONS:
            raise VerifyError(
                f"Partial: reduction {self.reduction!r} is not one of {', '.join(REDUCTIONS)}"
            )

    def __repr__(self) -> str:
        return f"P({self.reduction})"


S = Split
P = Partial
B = Broadcast()
"""The Broadcast attr itself (an instance, so `(S(0), B)` reads like the seed); `B()` is refused."""


def _refuse(rule: str, what: str, fix: str) -> VerifyError:
    return VerifyError(f"ShardLayout: {what} ({rule}); {fix}")


class ShardLayout(LayoutBase):
    """`layout` bound to `mesh` by one attr per mesh axis (seed §7); every seed rule is checked
    when it is built, so a ShardLayout that exists is one the rest of the compiler may trust.
    """

    __slots__ = ("_attrs", "_layout", "_mesh")

    def __init__(self, layout: LayoutBase, attrs: tuple[ShardAttr, ...], mesh: Mesh):
        attrs = _check_fields(layout, attrs, mesh)
        object.__setattr__(self, "_layout", layout)
        object.__setattr__(self, "_attrs", attrs)
        object.__setattr__(self, "_mesh", mesh)
        _check_binding(self)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ShardLayout is immutable; cannot set {name!r}")

    @property
    def layout(self) -> LayoutBase:
        return self._layout

    @property
    def attrs(self) -> tuple[ShardAttr, ...]:
        return self._attrs

    @property
    def mesh(self) -> Mesh:
        return self._mesh

    @property
    def shape(self) -> Any:
        """The canonical global layout-domain shape G (seed §7.1.1)."""
        return self._layout.shape

    def __call__(self, *coord: Any) -> Any:
        return self._layout(*coord)

    def is_injective(self) -> bool:
        return self._layout.is_injective()

    def cosize(self) -> Any:
        return self._layout.cosize()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardLayout):
            return NotImplemented
        return (self._layout, self._attrs, self._mesh) == (other._layout, other._attrs, other._mesh)

    def __hash__(self) -> int:
        return hash((ShardLayout, self._layout, self._attrs, self._mesh))

    def __copy__(self) -> ShardLayout:
        return self

    def __deepcopy__(self, memo: dict) -> ShardLayout:
        """A type constant is its own copy (and Layout refuses the generic copy protocol)."""
        return self

    def __repr__(self) -> str:
        return f"ShardLayout({self._layout}, {self._attrs!r}, {self._mesh!r})"


def _check_fields(layout: object, attrs: object, mesh: object) -> tuple[ShardAttr, ...]:
    if not isinstance(layout, LayoutBase):
        raise _refuse(
            "shard §7.1",
            f"layout must be a LayoutBase, got {layout!r}",
            "wrap the shape in Layout(shape)",
        )
    return _check_attrs(attrs, mesh)


def _check_attrs(attrs: object, mesh: object) -> tuple[ShardAttr, ...]:
    """The attrs are ShardAttr instances, one per mesh axis (seed §6, §7.2)."""
    if not isinstance(mesh, Mesh):
        raise _refuse(
            "shard §7.3",
            f"mesh must be a Mesh, got {mesh!r}",
            "build one with make_mesh or Mesh(Topology, Layout)",
        )
    if not isinstance(attrs, tuple | list):
        raise _refuse(
            "shard §7.2",
            f"attrs must be a tuple with one attr per mesh axis, got {attrs!r}",
            "write a tuple such as (S(0), B)",
        )
    for attr in attrs:
        if not isinstance(attr, ShardAttr):
            raise _refuse(
                "shard §6",
                f"attr {attr!r} is not a Split/Broadcast/Dynamic/Partial",
                "use S(k), B, Dynamic() or P(reduction) instances",
            )
    if len(attrs) != mesh.rank:
        raise _refuse(
            "shard §7.2: len(attrs) == rank(mesh)",
            f"{len(attrs)} attrs {tuple(attrs)!r} for the rank-{mesh.rank} mesh {mesh!r}",
            "give exactly one attr per mesh axis (B for an axis that does not split)",
        )
    return tuple(attrs)


def _check_binding(sl: ShardLayout) -> None:
    """The per-Split construction rules of DESIGN §4.3 (the attr count is checked before)."""
    bound: dict[int, int] = {}
    for mesh_axis, attr in enumerate(sl.attrs):
        if isinstance(attr, Split):
            _check_split_position(sl, mesh_axis, attr.axis, bound)
            bound[attr.axis] = mesh_axis
    for position, mesh_axis in bound.items():
        _check_single_mode(sl, mesh_axis, position)
        _check_split_extent(sl, mesh_axis, position)
        _check_split_stride(sl, mesh_axis, position)


def _check_split_position(sl: ShardLayout, mesh_axis: int, position: int, bound: dict) -> None:
    label = sl.mesh.axes[mesh_axis].label
    if not 0 <= position < sl.domain_rank:
        raise _refuse(
            "shard §6/§7.1.1: 0 <= k < rank(flatten(layout.shape))",
            f"{label} has Split({position}) but the layout {sl.layout} has domain rank "
            f"{sl.domain_rank}",
            "Split(k) indexes a layout position; split an existing position",
        )
    if position in bound:
        other = sl.mesh.axes[bound[position]].label
        raise _refuse(
            "shard §6: one mesh axis per layout axis",
            f"{other} and {label} both Split layout position {position}",
            f"factor position {position} into one position per mesh axis (N @ (m.a, m.b) sugar "
            "or canonical_shard_layout does this)",
        )


def _check_single_mode(sl: ShardLayout, mesh_axis: int, position: int) -> None:
    """A Split needs exactly one stride on its dim; a sub-mode of a nested mode (cyclic or
    interleaved distribution) or a non-affine composition would need several (seed §7.1.2).
    """
    label = sl.mesh.axes[mesh_axis].label
    mode = _top_level_mode_of(sl.shape, position)
    if len(flatten(mode)) != 1:
        raise _refuse(
            "shard §7.1.2: cyclic / interleaved layouts are rejected",
            f"{label} splits position {position}, which lies inside the nested mode {mode!r} "
            f"of {sl.layout}",
            "make the split dim its own top-level mode (flatten the layout shape)",
        )
    if not isinstance(sl.layout, Layout):
        _check_measured_split_stride(sl, label, position)


def _top_level_mode_of(shape: Any, position: int) -> Any:
    """The top-level mode of `shape` that holds flat position `position`."""
    if not is_tuple(shape):
        return shape
    return [mode for mode in shape for _ in flatten(mode)][position]


def _check_measured_split_stride(sl: ShardLayout, label: str, position: int) -> None:
    """Beyond a plain Layout (a composition, a nested ShardLayout) the step along the Split dim
    is not one declared stride, so it is measured: it must be the same everywhere."""
    extents = flatten(sl.shape)
    if not is_static(sl.shape) or prod(extents) > INJECTIVITY_ENUMERATION_LIMIT:
        raise _refuse(
            "shard §7.1.2: one stride per Split axis",
            f"{label} splits position {position} of {sl.layout}, whose step cannot be "
            "verified for a symbolic or huge domain",
            "split a plain Layout, or a composition over a small static domain",
        )
    steps = set()
    for flat in cartesian(*(range(extent) for extent in extents)):
        if flat[position] + 1 < extents[position]:
            moved = (*flat[:position], flat[position] + 1, *flat[position + 1 :])
            steps.add(_apply_flat(sl.layout, moved) - _apply_flat(sl.layout, flat))
    if len(steps) > 1:
        raise _refuse(
            "shard §7.1.2: cyclic / interleaved layouts are rejected",
            f"{label} splits position {position} of {sl.layout}, which moves by the several "
            f"strides {sorted(steps)}",
            "split a layout with one stride on that dim",
        )
    if steps and min(steps) < 0:
        raise _refuse(
            "shard §7.1.2: S[k] in {0} ∪ Z>0 on a Split dim",
            f"{label} splits position {position} of {sl.layout}, whose stride is {min(steps)}",
            "use stride 0 (per-instance engine) or a positive stride (shared engine)",
        )


def _apply_flat(layout: LayoutBase, flat: tuple) -> Any:
    return layout(unflatten(flat, layout.shape)) if is_tuple(layout.shape) else layout(*flat)


def _check_split_extent(sl: ShardLayout, mesh_axis: int, position: int) -> None:
    axis = sl.mesh.axes[mesh_axis]
    extent = flatten(sl.shape)[position]
    if is_int(extent) and is_int(axis.size) and extent != axis.size:
        raise _refuse(
            "shard §7.1.1: G[k] == mesh.shape[a] on a Split dim (canonical form)",
            f"{axis.label} of extent {axis.size} splits layout position {position} of extent "
            f"{extent}",
            f"factor the dim as ({axis.size} @ m.{axis.name or axis.index}, "
            f"{extent}//{axis.size}) (canonical_shard_layout does this)",
        )


def _check_split_stride(sl: ShardLayout, mesh_axis: int, position: int) -> None:
    """Split strides are 0 (one engine per instance) or positive (a shared engine), §7.1.2.

    A symbolic stride is a product of extents in every materialisation, so it is accepted.
    """
    layout = sl.layout
    if not isinstance(layout, Layout) or layout.stride is None:
        return
    stride = flatten(layout.stride)[position]
    if stride is None or (is_int(stride) and stride < 0):
        raise _refuse(
            "shard §7.1.2: S[k] in {0} ∪ Z>0 on a Split dim",
            f"{sl.mesh.axes[mesh_axis].label} splits layout position {position} whose stride "
            f"is {stride}",
            "use stride 0 (per-instance engine) or a positive stride (shared engine)",
        )


def split_positions(sl: ShardLayout) -> dict[int, int]:
    """Layout position → the mesh axis that splits it."""
    return {
        attr.axis: mesh_axis for mesh_axis, attr in enumerate(sl.attrs) if isinstance(attr, Split)
    }


def partial_axes(sl: ShardLayout) -> tuple[int, ...]:
    """The mesh axes that carry an un-reduced Partial value."""
    return tuple(mesh_axis for mesh_axis, attr in enumerate(sl.attrs) if isinstance(attr, Partial))


def shard_layout_local_shape(sl: ShardLayout) -> tuple:
    """What one mesh instance holds, per flat layout position (seed §7.1.1).

    A Split dim is 1 in the canonical form; a symbolic dim split whole by one mesh axis (which
    canonical_shard_layout cannot factor) is `G[k] // extent`.
    """
    bound = split_positions(sl)
    local = []
    for position, extent in enumerate(flatten(sl.shape)):
        if position not in bound:
            local.append(extent)
            continue
        axis = sl.mesh.axes[bound[position]]
        if extent is axis.size or same_value(extent, axis.size):
            local.append(1)
        elif extent is None:
            local.append(None)
        elif is_int(axis.size):
            local.append(extent // axis.size)
        else:
            raise _refuse(
                "shard §7.1.1: local extent = G[k] / mesh.shape[a]",
                f"{axis.label} has extent {axis.size} and splits layout position {position} "
                f"of extent {extent}, so the local extent is unknown",
                "give the mesh axis a static extent",
            )
    return tuple(local)


def _require_known(extents: tuple, what: str) -> tuple:
    if any(extent is None for extent in extents):
        raise _refuse(
            "shard §7.1.2: materialised strides are concrete",
            f"{what} {extents!r} has a launch-provided extent",
            "materialise strides only over known (static or symbolic) extents",
        )
    return extents


def per_instance_strides(sl: ShardLayout | Layout) -> tuple:
    """The high → low Reshard default: each instance its own compact engine (seed §7.5).

    C-order over the local shape, with 0 on Split dims and on every size-1 dim, so a Split
    contributes no offset inside an engine. A plain Layout (the target of a value on no mesh)
    is the form without Splits: its local shape is its shape.
    """
    if isinstance(sl, ShardLayout):
        local, bound = shard_layout_local_shape(sl), split_positions(sl)
    else:
        local, bound = flatten(sl.shape), {}
    local = _require_known(local, "local shape")
    return tuple(
        0 if position in bound or is_value(extent, 1) else stride
        for position, (extent, stride) in enumerate(zip(local, c_order_strides(local), strict=True))
    )


def shared_strides(sl: ShardLayout | Layout) -> tuple:
    """The low → high Reshard default: C-order over the global shape, one shared engine (§7.5)."""
    return c_order_strides(_require_known(flatten(sl.shape), "layout shape"))


def with_strides(sl: ShardLayout, strides: tuple | None) -> ShardLayout:
    """`sl` with its Layout's strides replaced (flat or nested), re-checked like any new one."""
    if not isinstance(sl.layout, Layout):
        raise _refuse(
            "shard §7.1.2",
            f"cannot set strides on the {type(sl.layout).__name__} {sl.layout}",
            "materialise strides on a ShardLayout over a plain Layout",
        )
    if strides is not None:
        flat = flatten(strides)
        if len(flat) != sl.domain_rank:
            raise _refuse(
                "shard §7.1.2: strides None, () or a tuple of matching rank",
                f"{len(flat)} strides {strides!r} for the domain rank {sl.domain_rank} of "
                f"{sl.layout}",
                "give one stride per layout position",
            )
        strides = unflatten(flat, sl.shape)
    return ShardLayout(Layout(sl.shape, strides), sl.attrs, sl.mesh)


def factor_sugar(extent: Any, mesh_axes: MeshAxis | tuple[MeshAxis, ...]) -> tuple:
    """The canonical positions of the sugar `extent @ mesh_axes` (seed §7.1.1, parser §1.5).

    Returns `((extent, MeshAxis | None), ...)`: one position per mesh axis, in the given order,
    of that axis's extent, then the residual `extent // prod(mesh extents)` when it is not 1.
    A symbolic extent cannot be factored: over one mesh axis it stays whole, over several it is
    refused.
    """
    axes = (mesh_axes,) if isinstance(mesh_axes, MeshAxis) else mesh_axes
    _check_sugar_axes(extent, axes)
    sizes = [axis.size for axis in axes]
    labels = " and ".join(axis.label for axis in axes)
    if is_int(extent) and all(is_int(size) for size in sizes):
        if extent % prod(sizes):
            raise _refuse(
                "shard §7.1.1: canonical regroup needs the mesh extent to divide the axis",
                f"extent {extent} is not divisible by {prod(sizes)} ({labels})",
                "choose an extent that is a multiple of the mesh extents, or split fewer axes",
            )
        residual = extent // prod(sizes)
        positions = tuple((size, axis) for size, axis in zip(sizes, axes, strict=True))
        return positions if residual == 1 else (*positions, (residual, None))
    if len(axes) == 1:
        return ((extent, axes[0]),)
    raise _refuse(
        "shard §7.1.1: canonical regroup factors an axis into mesh-extent positions",
        f"the symbolic extent {extent} cannot be factored over {labels}",
        "split a symbolic axis by one mesh axis only, or give it a static extent",
    )


def _check_sugar_axes(extent: Any, axes: object) -> None:
    if not isinstance(axes, tuple) or not axes:
        raise _refuse(
            "shard §7.1.1",
            f"{extent} @ {axes!r} needs a mesh axis or a non-empty tuple of them",
            "write N @ m.a or N @ (m.a, m.b)",
        )
    for axis in axes:
        if not isinstance(axis, MeshAxis):
            raise _refuse(
                "shard §7.1.1",
                f"{axis!r} in {extent} @ ... is not a mesh axis",
                "take axes from the mesh (m.a or m.axes[i])",
            )
    if len(set(axes)) != len(axes):
        raise _refuse(
            "shard §6: one layout axis per mesh axis",
            f"{extent} @ {axes!r} binds a mesh axis twice",
            "name each axis once",
        )


def canonical_shard_layout(logical_shape: tuple, mesh: Mesh, attrs: tuple) -> ShardLayout:
    """The canonical ShardLayout of a tensor whose `Split(i)` attrs name *logical* axes (DESIGN §3).

    Each split logical axis becomes its mesh-extent positions in mesh-axis order plus a residual
    (`factor_sugar`); the Splits are renumbered to those layout positions; strides are C-order,
    or None when an extent is symbolic. By seed §3.1's row-major regroup, this layout's domain
    linearises exactly like the logical shape.
    """
    logical_shape = tuple(logical_shape) if isinstance(logical_shape, tuple | list) else None
    if logical_shape is None:
        raise _refuse(
            "shard §7.1.1",
            "the logical shape must be a tuple of extents",
            "pass the TensorType shape",
        )
    attrs = _check_attrs(attrs, mesh)
    splitting = _mesh_axes_by_logical_axis(logical_shape, mesh, attrs)
    extents: list = []
    position_of_mesh_axis: dict[int, int] = {}
    for logical_axis, extent in enumerate(logical_shape):
        if logical_axis not in splitting:
            extents.append(extent)
            continue
        for part, axis in factor_sugar(extent, splitting[logical_axis]):
            if axis is not None:
                position_of_mesh_axis[axis.index] = len(extents)
            extents.append(part)
    layout_attrs = tuple(
        Split(position_of_mesh_axis[mesh_axis]) if isinstance(attr, Split) else attr
        for mesh_axis, attr in enumerate(attrs)
    )
    shape = tuple(extents)
    strides = c_order_strides(shape) if is_static(shape) else None
    return ShardLayout(Layout(shape, strides), layout_attrs, mesh)


def _mesh_axes_by_logical_axis(
    logical_shape: tuple, mesh: Mesh, attrs: tuple
) -> dict[int, tuple[MeshAxis, ...]]:
    """Logical axis → the mesh axes splitting it, in mesh-axis order."""
    splitting: dict[int, tuple[MeshAxis, ...]] = {}
    for mesh_axis, attr in enumerate(attrs):
        if not isinstance(attr, Split):
            continue
        logical_axis = attr.axis
        if not 0 <= logical_axis < len(logical_shape):
            raise _refuse(
                "DESIGN §3: Split(i) names logical axis i in make_shard_tensor_type",
                f"{mesh.axes[mesh_axis].label} has Split({logical_axis}) but the logical shape "
                f"{logical_shape!r} has rank {len(logical_shape)}",
                "split an existing logical axis",
            )
        splitting[logical_axis] = (*splitting.get(logical_axis, ()), mesh.axes[mesh_axis])
    return splitting
