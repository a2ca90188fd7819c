"""The device domain: `Topology`, `Mesh` and `MeshAxis` (seed shard §5, DESIGN §4.1).

A Mesh is a compile-time constant that sits inside types (every ShardLayout holds one), so it is
immutable, hashable and compared by value. It never becomes an IR value: slicing `m[...]` builds
another constant Mesh whose layout is a `ComposedLayout` recording the sub-box.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, fields
from functools import cached_property
from math import prod

from tilefoundry.errors import VerifyError
from tilefoundry.ir.names import check_name
from tilefoundry.ir.types.shard.int_tuple import is_int, is_value
from tilefoundry.ir.types.shard.layout import ComposedLayout, Layout


def c_order_strides(shape: tuple) -> tuple:
    """Row-major strides over a flat shape (last axis fastest).

    Every *materialisation* of strides for meshes and tensors is C-order (DESIGN §4.2), unlike
    pycute's column-major `prefix_product`; this is the one place that computes it. Symbolic
    extents multiply through as dim expressions (a leading factor 1 is folded away).
    """
    strides: list = []
    running: object = 1
    for extent in reversed(shape):
        strides.append(running)
        if not is_value(extent, 1):
            running = extent if is_value(running, 1) else extent * running
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Topology:
    """A device-domain level (`device`, `cta`, `warp`, ...) and how many units it has.

    `num_devices=None` is a launch-provided extent (a dynamic `cta` count, seed §5).
    """

    name: str
    num_devices: int | None

    def __post_init__(self) -> None:
        check_name("Topology", self.name)
        count = self.num_devices
        if count is not None and (not is_int(count) or count < 1):
            raise VerifyError(
                f"Topology: num_devices of {self.name!r} must be a positive int or None "
                f"(launch-provided), got {count!r}"
            )


class UnknownMeshAxisError(VerifyError, AttributeError):
    """`mesh.<name>` for a name the mesh does not have.

    It is an AttributeError too, so `hasattr`/`getattr(..., default)` keep working on meshes.
    """


def _axis_label(names: tuple[str, ...] | None, index: int) -> str:
    return f"mesh axis {index} ({names[index]!r})" if names else f"mesh axis {index}"


@dataclass(frozen=True, repr=False)
class MeshAxis:
    """One axis of a mesh, as `mesh.x` or `mesh.axes[i]` give it (seed §5)."""

    mesh: Mesh
    index: int
    size: object

    def __post_init__(self) -> None:
        if not isinstance(self.mesh, Mesh):
            raise VerifyError(f"MeshAxis: mesh must be a Mesh, got {type(self.mesh).__name__}")
        if not is_int(self.index) or not 0 <= self.index < self.mesh.rank:
            raise VerifyError(f"MeshAxis: index {self.index!r} is not an axis of {self.mesh!r}")
        if self.size != self.mesh.shape[self.index]:
            raise VerifyError(
                f"MeshAxis: size {self.size!r} differs from the extent "
                f"{self.mesh.shape[self.index]!r} of {_axis_label(self.mesh.names, self.index)}; "
                "take the axis from the mesh (mesh.axes[i] or mesh.<name>)"
            )

    @property
    def name(self) -> str | None:
        return self.mesh.names[self.index] if self.mesh.names else None

    @property
    def label(self) -> str:
        """How error messages name this axis."""
        return _axis_label(self.mesh.names, self.index)

    def __repr__(self) -> str:
        title = self.name if self.name is not None else str(self.index)
        return f"MeshAxis({title}={self.size!r} of {self.mesh!r})"

    # Layout sugar (parser §1.5): `N @ m.a`, `N @ (m.a * m.b)` and `m.a @ P("sum")` build the
    # unchecked records of `sugar.py`; the frontend checks them where it knows the source line.
    # The imports are local because sugar.py builds on this module.
    def __rmatmul__(self, extent: object) -> object:
        from tilefoundry.ir.types.shard.sugar import SplitSugar

        return SplitSugar(extent, (self,))

    def __matmul__(self, state: object) -> object:
        from tilefoundry.ir.types.shard.sugar import ValueStateSugar

        return ValueStateSugar(self, state)

    def __mul__(self, other: object) -> object:
        from tilefoundry.ir.types.shard.sugar import AxisGroup, axes_of

        return AxisGroup((self, *axes_of(other)))


def _normalise_topologies(topologies: object) -> tuple[Topology, ...]:
    """One Topology or a non-empty sequence of them; a raw name is refused (seed §5)."""
    if isinstance(topologies, str):
        raise VerifyError(
            f"Mesh: topology {topologies!r} is a raw string; build Topology({topologies!r}, "
            "num_devices) first, or use make_mesh(shape, names, topology=...) (shard §5)"
        )
    if isinstance(topologies, Topology):
        return (topologies,)
    if isinstance(topologies, tuple | list) and topologies:
        for entry in topologies:
            if not isinstance(entry, Topology):
                raise VerifyError(
                    f"Mesh: every topology must be a Topology, got {entry!r}; build "
                    "Topology(name, num_devices) first (shard §5)"
                )
        return tuple(topologies)
    raise VerifyError(
        f"Mesh: topologies must be a Topology or a non-empty tuple of them, got {topologies!r}"
    )


def _check_mesh_layout(layout: object) -> tuple:
    """The mesh extents of a plain Layout or of a slice's `ComposedLayout(None, offset, Layout)`.

    Slicing computes offsets by applying the layout, which is only sound for these affine forms,
    so any other composition is refused here rather than mis-sliced later.
    """
    is_slice_form = (
        isinstance(layout, ComposedLayout)
        and layout.inner is None
        and isinstance(layout.outer, Layout)
    )
    if not (isinstance(layout, Layout) or is_slice_form):
        raise VerifyError(
            f"Mesh: layout must be a Layout (or the ComposedLayout(None, offset, Layout) a slice "
            f"builds), got {layout!r}; write Layout(shape) or use make_mesh (shard §5)"
        )
    shape = layout.shape if isinstance(layout.shape, tuple) else (layout.shape,)
    for index, extent in enumerate(shape):
        if isinstance(extent, tuple):
            raise VerifyError(
                f"Mesh: layout mode {index} is nested ({extent!r}); each mesh axis is one flat "
                "mode, so flatten the mesh shape"
            )
        if isinstance(extent, bool) or (is_int(extent) and extent < 1):
            raise VerifyError(
                f"Mesh: extent {extent!r} of mesh axis {index} must be a positive int, a "
                "symbolic dim or None (launch-provided)"
            )
    return shape


def _check_names(names: object, rank: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str) or not isinstance(names, tuple | list):
        raise VerifyError(f"Mesh: names must be a tuple of str, got {names!r}")
    names = tuple(names)
    if len(names) != rank:
        raise VerifyError(f"Mesh: {len(names)} names {names!r} for a rank-{rank} mesh")
    for name in names:
        if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
            raise VerifyError(f"Mesh: axis name {name!r} must be a Python identifier")
        if name.startswith("_") or hasattr(Mesh, name) or name in _MESH_FIELDS:
            raise VerifyError(
                f"Mesh: axis name {name!r} would be shadowed by a Mesh attribute (mesh.{name}); "
                "choose another name"
            )
    if len(set(names)) != len(names):
        raise VerifyError(f"Mesh: axis names {names!r} repeat")
    return names


@dataclass(frozen=True, repr=False)
class Mesh:
    """The parallel device domain (seed §5): topologies, the mesh's own layout, axis names."""

    topologies: tuple[Topology, ...]
    layout: Layout | ComposedLayout
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "topologies", _normalise_topologies(self.topologies))
        shape = _check_mesh_layout(self.layout)
        object.__setattr__(self, "names", _check_names(self.names, len(shape)))
        self._check_fits_devices(shape)

    def _check_fits_devices(self, shape: tuple) -> None:
        """More mesh coordinates than devices cannot be an injective placement."""
        domain = self.topology_domain()
        if domain is None or not all(is_int(extent) for extent in shape):
            return
        if prod(shape) > domain:
            raise VerifyError(
                f"Mesh: layout shape {shape!r} has {prod(shape)} coordinates but the topologies "
                f"provide {domain} devices; grow the topology or shrink the layout"
            )

    @property
    def topology(self) -> Topology:
        """The primary (first) topology; `mesh.topology is mesh.topologies[0]`."""
        return self.topologies[0]

    # A Mesh is immutable and sits inside every sharded type, so its derived views are computed
    # once (cached_property writes the instance dict directly, which a frozen dataclass allows).
    @cached_property
    def shape(self) -> tuple:
        shape = self.layout.shape
        return shape if isinstance(shape, tuple) else (shape,)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @cached_property
    def axes(self) -> tuple[MeshAxis, ...]:
        return tuple(MeshAxis(self, index, extent) for index, extent in enumerate(self.shape))

    def topology_domain(self) -> int | None:
        """How many devices the topologies provide; None when any count is launch-provided."""
        counts = [topology.num_devices for topology in self.topologies]
        return None if any(count is None for count in counts) else prod(counts)

    def __copy__(self) -> Mesh:
        return self

    def __deepcopy__(self, memo: dict) -> Mesh:
        """A constant is its own copy (and its Layout refuses the generic copy protocol)."""
        return self

    def __getattr__(self, name: str) -> MeshAxis:
        # Reads the field through __dict__: during copy/unpickling `names` may not be set yet,
        # and going through getattr would recurse into this method.
        names = vars(self).get("names")
        if name.startswith("_") or not names:
            raise UnknownMeshAxisError(f"Mesh: no attribute or axis named {name!r}")
        if name not in names:
            raise UnknownMeshAxisError(
                f"Mesh: no axis named {name!r}; this mesh has axes {', '.join(names)}"
            )
        return self.axes[names.index(name)]

    def __getitem__(self, key: object) -> Mesh:
        """The constant sub-box `mesh[i, a:b, ...]` as a Mesh over the same devices.

        An int index drops its axis; a slice keeps it. The result's layout is
        `ComposedLayout(None, offset, Layout(sub_shape, sub_strides))`, so applying it to a
        sub-box coordinate gives the same device index as the parent mesh does.
        """
        indices = key if isinstance(key, tuple) else (key,)
        if len(indices) > self.rank:
            raise VerifyError(
                f"Mesh[...]: {len(indices)} indices for the rank-{self.rank} mesh {self!r}"
            )
        self._require_static_extents()
        indices = indices + (slice(None),) * (self.rank - len(indices))
        start: list[int] = []
        kept: list[tuple[int, int, int]] = []
        for axis, index in enumerate(indices):
            first, length, step = self._resolve_index(axis, index)
            start.append(first)
            if length is not None:
                kept.append((axis, length, step))
        offset = self.layout(*start)
        sub_shape = tuple(length for _, length, _ in kept)
        sub_strides = tuple(self._unit_stride(axis) * step for axis, _, step in kept)
        sub_names = tuple(self.names[axis] for axis, _, _ in kept) if self.names else None
        sub_layout = ComposedLayout(None, offset, Layout(sub_shape, sub_strides))
        return Mesh(self.topologies, sub_layout, sub_names)

    def _require_static_extents(self) -> None:
        for axis, extent in enumerate(self.shape):
            if not is_int(extent):
                raise VerifyError(
                    f"Mesh[...]: {_axis_label(self.names, axis)} has extent {extent}; slicing "
                    "needs static int extents (shard §1), so slice a mesh with a fixed shape"
                )

    def _resolve_index(self, axis: int, index: object) -> tuple[int, int | None, int]:
        """(first coordinate, kept length or None for a dropped axis, step) of one index."""
        extent = self.shape[axis]
        label = _axis_label(self.names, axis)
        if is_int(index):
            position = index + extent if index < 0 else index
            if not 0 <= position < extent:
                raise VerifyError(
                    f"Mesh[...]: index {index} is out of range for {label} (extent {extent})"
                )
            return position, None, 1
        if isinstance(index, slice):
            for bound in (index.start, index.stop, index.step):
                if bound is not None and not is_int(bound):
                    raise VerifyError(
                        f"Mesh[...]: slice {index!r} on {label} must have constant int bounds"
                    )
            first, stop, step = index.indices(extent)
            length = len(range(first, stop, step))
            if step < 1 or length == 0:
                raise VerifyError(
                    f"Mesh[...]: slice {index!r} on {label} (extent {extent}) must select a "
                    "non-empty range with a positive step"
                )
            return first, length, step
        raise VerifyError(f"Mesh[...]: index {index!r} on {label} must be a constant int or slice")

    def _unit_stride(self, axis: int) -> int:
        """How far the device index moves per step along `axis` (the layouts are affine)."""
        if self.shape[axis] == 1:
            return 0
        origin = [0] * self.rank
        step = list(origin)
        step[axis] = 1
        return self.layout(*step) - self.layout(*origin)

    def __repr__(self) -> str:
        topologies = "*".join(
            f"{t.name}[{'?' if t.num_devices is None else t.num_devices}]" for t in self.topologies
        )
        extents = [repr(extent) for extent in self.shape]
        if self.names:
            extents = [f"{name}={extent}" for name, extent in zip(self.names, extents, strict=True)]
        text = f"Mesh({topologies}: {', '.join(extents)}"
        if not self._has_make_mesh_layout():
            text += f"; layout={self.layout!r}"
        return text + ")"

    def _has_make_mesh_layout(self) -> bool:
        """Whether the layout is the C-order one `make_mesh` builds (then repr omits it)."""
        return isinstance(self.layout, Layout) and self.layout.stride == c_order_strides(self.shape)


_MESH_FIELDS = frozenset(field.name for field in fields(Mesh))


def is_device_mesh(mesh: Mesh) -> bool:
    """Whether the mesh's coordinates are real devices (DESIGN §4.13: one `"device"` level), so
    what the types allow must be something the SPMD exit can lay out."""
    return [t.name for t in mesh.topologies] == ["device"]


def make_mesh(shape: object, names: object = None, topology: str | Topology = "device") -> Mesh:
    """A mesh over `prod(shape)` devices of one topology, laid out in C-order (DESIGN §3)."""
    extents = shape if isinstance(shape, tuple | list) else (shape,)
    extents = tuple(extents)
    for extent in extents:
        if not is_int(extent) or extent < 1:
            raise VerifyError(
                f"make_mesh: extents must be positive ints, got {shape!r}; build Mesh(Topology, "
                "Layout) directly for a launch-provided extent"
            )
    if isinstance(topology, str):
        topology = Topology(topology, prod(extents))
    return Mesh(topology, Layout(extents, c_order_strides(extents)), names)
