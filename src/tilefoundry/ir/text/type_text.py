"""Canonical text for types, layouts and meshes.

One spelling per type, so printed IR can be golden-tested and diffed:

    f32[16, 8]                                         plain, gmem (the default storage is omitted)
    i32[4] rmem                                        another storage
    f32[4, 8] #layout<(4,8):(1,4)>                     a plain physical layout
    f32[16, 8] #shard<@mesh[x=S(0), y=P(sum)], (4,4,8):(32,8,1)>

A ShardLayout names its mesh (`@mesh`) instead of spelling it out: meshes are declared once at the
top of a printed function or module (`mesh @mesh = device(8)[x=4, y=2]`), as Shardy does, because
a mesh repeated inside every type would drown the program. Each mesh axis is printed with its
state (`x=S(0)`), so nobody has to count attr positions.
"""

from __future__ import annotations

from typing import Any

from tilefoundry.ir.types import StorageKind, TensorType, TupleType, UnitType, format_dim
from tilefoundry.ir.types.shard import Layout, Mesh, ShardLayout
from tilefoundry.ir.types.shard.mesh import c_order_strides


class MeshNames:
    """Stable printed names for the meshes met while printing, in order of first appearance.

    A single mesh is `@mesh`; several are `@mesh0`, `@mesh1`, ... — decided only once every mesh
    has been seen, so names never change half-way through a printout.
    """

    def __init__(self) -> None:
        self._order: list[Mesh] = []

    def add(self, mesh: Mesh) -> None:
        if mesh not in self._order:
            self._order.append(mesh)

    def name(self, mesh: Mesh) -> str:
        self.add(mesh)
        if len(self._order) == 1:
            return "@mesh"
        return f"@mesh{self._order.index(mesh)}"

    def declarations(self) -> list[str]:
        return [f"mesh {self.name(mesh)} = {format_mesh(mesh)}" for mesh in self._order]

    def collect_type(self, type_: Any) -> None:
        """Register every mesh reachable from `type_` so that naming is final before printing."""
        if isinstance(type_, TupleType):
            for field in type_.fields:
                self.collect_type(field)
        elif isinstance(type_, TensorType) and isinstance(type_.layout, ShardLayout):
            self.add(type_.layout.mesh)


def format_mesh(mesh: Mesh) -> str:
    """`device(8)[x=4, y=2]`; a non-default mesh layout is appended after a colon."""
    topologies = "*".join(
        f"{t.name}({'?' if t.num_devices is None else t.num_devices})" for t in mesh.topologies
    )
    names = mesh.names or tuple(f"a{i}" for i in range(mesh.rank))
    axes = ", ".join(f"{n}={format_dim(e)}" for n, e in zip(names, mesh.shape, strict=True))
    text = f"{topologies}[{axes}]"
    default = mesh.layout == Layout(mesh.shape, c_order_strides(mesh.shape))
    return text if default else f"{text} : {mesh.layout}"


def format_shard_layout(layout: ShardLayout, meshes: MeshNames) -> str:
    mesh = layout.mesh
    names = mesh.names or tuple(f"a{i}" for i in range(mesh.rank))
    states = ", ".join(f"{n}={attr!r}" for n, attr in zip(names, layout.attrs, strict=True))
    return f"#shard<{meshes.name(mesh)}[{states}], {layout.layout}>"


def format_type(type_: Any, meshes: MeshNames | None = None) -> str:
    """The canonical spelling of an IR type (see the module docstring)."""
    meshes = meshes if meshes is not None else MeshNames()
    if isinstance(type_, TupleType):
        return "(" + ", ".join(format_type(f, meshes) for f in type_.fields) + ")"
    if isinstance(type_, UnitType):
        return "()"
    if not isinstance(type_, TensorType):
        return str(type_)
    text = f"{type_.dtype.name}[{', '.join(format_dim(d) for d in type_.shape)}]"
    if type_.storage != StorageKind.GMEM:
        text += f" {type_.storage}"
    if isinstance(type_.layout, ShardLayout):
        text += " " + format_shard_layout(type_.layout, meshes)
    elif type_.layout is not None:
        text += f" #layout<{type_.layout}>"
    return text
