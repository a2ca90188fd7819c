"""Mesh geometry for the SPMD exit: which devices a mesh is, and what each one holds.

DESIGN §4.13: a `"device"` mesh maps onto real devices in row-major order of its layout, so the
device with mesh coordinate `c` is partition `crd2idx(c, shape, C-order strides)`; Shardy's
`sdy.mesh` with its default (iota) device order says the same thing, and so do the replica groups
written here. A value's block on a device is what the reference evaluator gives it
(`evaluator.values`): each Split logical axis is cut into equal contiguous blocks numbered
mixed-radix over its mesh axes, outermost first, so only canonical layouts (each Split an
outermost factor of its logical axis) have a block reading, and others fail closed; both read it
through `sharding.shard_reading.canonical_splits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product as cartesian
from math import prod

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.lowering.mlir_text import mlir_symbol
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Layout, Mesh
from tilefoundry.ir.types.shard.int_tuple import is_int
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.sharding.mesh_views import Refinement
from tilefoundry.sharding.shard_reading import canonical_splits

EXIT = "the SPMD exit"
"""How this exit names itself when a shared reader (canonical_splits, the plans) refuses."""


def check_device_mesh(mesh: Mesh, where: str) -> None:
    """Only a static, row-major `"device"` mesh has a device for every coordinate."""
    names = [t.name for t in mesh.topologies]
    if names != ["device"]:
        raise UnsupportedError(
            f"{where}: its mesh {mesh!r} runs on the {'/'.join(names)} topology; the SPMD exit "
            "maps only 'device' meshes onto XLA devices (cta, warp and thread meshes belong to "
            "the kernel backends and the reference evaluator)"
        )
    if not all(is_int(extent) for extent in mesh.shape):
        raise UnsupportedError(
            f"{where}: mesh {mesh!r} has a launch-provided extent; the SPMD exit needs a static "
            "mesh shape"
        )
    layout = mesh.layout
    if not isinstance(layout, Layout) or layout.stride not in (None, c_order_strides(mesh.shape)):
        raise UnsupportedError(
            f"{where}: mesh {mesh!r} is laid out as {layout}, not row-major over its shape; the "
            "SPMD exit places mesh coordinates on devices in row-major order (DESIGN §4.13), so "
            "build the mesh with make_mesh or slice devices before compiling"
        )


def axis_names(mesh: Mesh) -> tuple[str, ...]:
    """The Shardy axis names: the mesh's own, or `a0, a1, ...` for an unnamed mesh, mangled to
    ASCII as function names are (`mlir_symbol`: `τ` is `_U3C4_`): XLA's import of Shardy's
    attributes aborts the process on a non-ASCII axis name. Names that mangle alike are told
    apart by a suffix."""
    if not mesh.names:
        return tuple(f"a{i}" for i in range(mesh.rank))
    names: list[str] = []
    for name in mesh.names:
        base = mlir_symbol(name)
        symbol, suffix = base, 1
        while symbol in names:
            symbol, suffix = f"{base}_{suffix}", suffix + 1
        names.append(symbol)
    return tuple(names)


def local_shape(type_: TensorType, shape: Sequence[int], where: str) -> tuple[int, ...]:
    """One device's block of a value of concrete global `shape`."""
    local = list(shape)
    layout = type_.layout
    for logical_axis, mesh_axes in canonical_splits(type_, where, EXIT).items():
        count = prod(layout.mesh.shape[m] for m in mesh_axes)
        if local[logical_axis] % count:
            raise UnsupportedError(
                f"{where}: extent {local[logical_axis]} of logical axis {logical_axis} does not "
                f"divide over its {count} devices"
            )
        local[logical_axis] //= count
    return tuple(local)


def sdy_sharding(type_: TensorType, rank: int, views: Refinement, where: str) -> str:
    """`<@mesh, [{"x"}, {}]>`: each logical axis's splitting axes of the module mesh (the
    common refinement of the program's meshes), major to minor."""
    names = axis_names(views.mesh)
    splits = views.splits(type_, where, EXIT)
    dims = []
    for axis in range(rank):
        dims.append("{" + ", ".join(f'"{names[m]}"' for m in splits.get(axis, ())) + "}")
    return f"<@mesh, [{', '.join(dims)}]>"


def device_id(mesh: Mesh, coord: Sequence[int]) -> int:
    index = 0
    for extent, c in zip(mesh.shape, coord, strict=True):
        index = index * extent + c
    return index


def replica_groups(mesh: Mesh, axes: Sequence[int]) -> list[list[int]]:
    """One group per coordinate of the other mesh axes (row-major); inside a group the devices
    are ordered mixed-radix over `axes` as given, which is the order their blocks concatenate."""
    others = [m for m in range(mesh.rank) if m not in axes]
    groups = []
    for rest in cartesian(*(range(mesh.shape[m]) for m in others)):
        group = []
        for inner in cartesian(*(range(mesh.shape[m]) for m in axes)):
            coord = [0] * mesh.rank
            for m, c in zip(others, rest, strict=True):
                coord[m] = c
            for m, c in zip(axes, inner, strict=True):
                coord[m] = c
            group.append(device_id(mesh, coord))
        groups.append(group)
    return groups


def groups_literal(groups: list[list[int]]) -> str:
    rows = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
    return f"dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>"


def axes_label(mesh: Mesh, axes: Sequence[int]) -> str:
    names = axis_names(mesh)
    return ",".join(names[m] for m in axes)
