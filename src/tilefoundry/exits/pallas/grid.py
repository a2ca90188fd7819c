"""The launch of a tile kernel: its grid (the `cta` mesh) and one BlockSpec per gmem value.

DESIGN §4.13: a `"cta"` mesh maps onto a Pallas grid, one program instance per CTA, so the grid
is the mesh shape and `pl.program_id(a)` is the CTA's coordinate on mesh axis `a`. A gmem
parameter or result Split over cta axes is a BlockSpec whose block is its local shape and whose
index map numbers the blocks mixed-radix over the splitting mesh axes, outermost first (the one
reading every engine shares, `shard_reading.canonical_splits`); an axis Broadcast (or unsharded)
is taken whole. Everything the grid cannot say is refused here, before any tracing: a program on
a `device` mesh (the SPMD exit runs those), a warp/thread level (a Pallas kernel exposes only the
grid), two meshes, a dynamic grid extent, and a Partial parameter or result (its addends live on
different CTAs; completing them needs a second pass or atomics).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Expr, source_span
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.facts import mesh_sites
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import Mesh
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

EXIT = "the Pallas exit"
GRID_TOPOLOGY = "cta"


def fields(type_: Type) -> tuple[TensorType, ...]:
    """The tensors of a (possibly nested) tuple type, in order."""
    if isinstance(type_, TupleType):
        return tuple(leaf for field in type_.fields for leaf in fields(field))
    return (type_,) if isinstance(type_, TensorType) else ()


def _where(fn: Function, node: Expr) -> str:
    if node in fn.params:
        return f"Function {fn.name}: parameter '{node.name}'"
    target = getattr(node, "target", None)
    if target is not None and not isinstance(target, Function):
        return type(target).__name__
    return type(node).__name__


def find_grid(fn: Function) -> Mesh | None:
    """The one `cta` mesh the program's values live on (None: a single-CTA kernel); a mesh the
    grid cannot be is refused where the program first uses it."""
    found: Mesh | None = None
    for mesh, node in mesh_sites(fn).items():
        where = _where(fn, node)
        _check_mesh(mesh, where, node)
        if found is not None:
            raise UnsupportedError(
                f"{where}: lives on {mesh} while the kernel's grid is {found}; one "
                "pallas_call has one grid; reshard onto one cta mesh",
                location=source_span(node),
            )
        found = mesh
    return found


def _check_mesh(mesh: Mesh, where: str, node: Expr) -> None:
    names = [t.name for t in mesh.topologies]
    location = source_span(node)
    if "device" in names:
        raise UnsupportedError(
            f"{where}: lives on a 'device' mesh, which {EXIT} does not launch (it maps a 'cta' "
            "mesh onto a kernel grid); run it with the SPMD exit, run_xla(fn, *arrays, devices=N)",
            location=location,
        )
    if names != [GRID_TOPOLOGY]:
        raise UnsupportedError(
            f"{where}: lives on a mesh of topology {'/'.join(names)}; a Pallas kernel exposes only "
            "the CTA grid (one program instance per CTA), no warp or thread level; write the "
            "program on a 'cta' mesh and let each CTA's body work on whole tiles",
            location=location,
        )
    if any(not isinstance(e, int) for e in mesh.shape) or mesh.topology.num_devices is None:
        raise UnsupportedError(
            f"{where}: its cta mesh has a dynamic extent {mesh.shape}; a pallas_call grid is "
            "fixed when the kernel is built; give the mesh static extents",
            location=location,
        )


@dataclass(frozen=True)
class BlockMap:
    """One gmem operand of the kernel: its global shape, the block one CTA sees, and per logical
    axis the mesh axes whose program ids number the block (outermost first; () = whole axis)."""

    name: str
    shape: tuple[int, ...]
    dtype: object
    block: tuple[int, ...]
    splits: tuple[tuple[int, ...], ...]

    def index_map(self, mesh_shape: tuple[int, ...]) -> Callable[..., tuple]:
        """The BlockSpec index map: program ids (in mesh-axis order) -> block coordinates."""
        splits = self.splits

        def index(*program_ids):
            coords = []
            for axes in splits:
                block = 0
                for axis in axes:
                    block = block * mesh_shape[axis] + program_ids[axis]
                coords.append(block)
            return tuple(coords)

        return index

    def describe(self, mesh: Mesh | None) -> str:
        """`name: f32[16, 8] block (8, 8) index (q, 0)` (the golden-tested summary line)."""
        index = []
        for axes in self.splits:
            terms = [_axis_name(mesh, a) for a in axes]
            text = terms[0] if terms else "0"
            for axis, term in zip(axes[1:], terms[1:], strict=True):
                text = f"{text}*{mesh.shape[axis]}+{term}"
            index.append(text)
        dims = ", ".join(str(e) for e in self.shape)
        return (
            f"{self.name}: {self.dtype}[{dims}] block {_tuple_text(self.block)} "
            f"index {_tuple_text(index)}"
        )


def _tuple_text(items) -> str:
    """Python's tuple spelling: `(8, 4)`, `(8,)`, `()`."""
    return str(tuple(items)).replace("'", "")


def _axis_name(mesh: Mesh, axis: int) -> str:
    return mesh.names[axis] if mesh.names else f"pid{axis}"


def block_map(name: str, type_: TensorType, shape: tuple[int, ...], mesh, where, node) -> BlockMap:
    """The BlockSpec of a gmem value of `type_` (concrete global `shape`)."""
    location = source_span(node)
    partials = pending_partials(type_)
    if partials:
        axis = next(iter(partials))
        raise UnsupportedError(
            f"{where}: is Partial({partials[axis]}) over the CTAs on "
            f"{mesh_axis_label(type_.layout.mesh, axis)}; its addends live on different CTAs "
            "and completing them needs a second pass or atomics, which one pallas_call does not "
            "express; reshard it to Broadcast or Split before it leaves the kernel",
            location=location,
        )
    try:
        splits = canonical_splits(type_, where, EXIT)
    except UnsupportedError as err:
        raise err.with_location(location) from None
    per_axis = tuple(tuple(splits.get(axis, ())) for axis in range(len(shape)))
    return BlockMap(name, tuple(shape), type_.dtype, local_block(shape, splits, mesh), per_axis)


def local_block(shape: tuple[int, ...], splits, mesh: Mesh | None) -> tuple[int, ...]:
    """One CTA's block of a value of global `shape` split as `splits` (axis -> mesh axes)."""
    return tuple(
        extent // prod(mesh.shape[a] for a in splits.get(axis, ()))
        for axis, extent in enumerate(shape)
    )
