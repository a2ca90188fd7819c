"""ScatterAdd's sharding rule, per mesh axis, over what each operand axis *is*.

A carried axis is an axis of `x` other than the scattered one, which `updates` and, for batch
axes, `indices` run along too; the scattered axis is `x`'s `axis`; an index position is an axis
of `indices` past the batch axes, and the matching axis of `updates`. A mesh axis may split only
one of them, the same way on every operand that splits it:

- a carried axis: the result is Split there (a replicated operand is cut to each device's block);
- the scattered axis (only `x` may split it): the result is Split there, each device adding only
  the updates whose index it owns (the transpose of Gather's masked local lookup);
- index positions (`indices` and `updates` split alike, the MoE combine): each device scatters
  its share of the updates, so the result is Partial(sum);
- no Split: Partial(sum) on `x` and/or `updates` carries (scatter-add is linear in both jointly).

Wherever the result is Partial(sum), a replicated `x` or `updates` is counted once, on the first
device along those mesh axes (zeros elsewhere). A pending max/min does not commute with the sum,
and indices have no addends, so those Partials fail closed. Both engines (the evaluator's
SHARDED_EVAL rule and the SPMD exit's) read the placement from here, so they agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import mesh_axis_label
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import B, Broadcast, Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.shard_layout import canonical_shard_layout
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

_RULE = "ScatterAdd's sharding rule"


@dataclass(frozen=True)
class ScatterReading:
    """What each axis of operand 0 (x), 1 (indices) or 2 (updates) is: ('carried', x axis),
    ('scattered', axis) or ('index', indices axis), and the result axis it runs along (None
    for an index position)."""

    axis: int
    batch: int
    n_index: int
    rank: int

    def roles(self, operand: int) -> tuple[tuple[str, int], ...]:
        axis, batch, n = self.axis, self.batch, self.n_index
        if operand == 0:
            return tuple(
                ("scattered", a) if a == axis else ("carried", a) for a in range(self.rank)
            )
        if operand == 1:
            return tuple(("carried", j) if j < batch else ("index", j) for j in range(batch + n))
        carried_after = [("carried", a) for a in range(axis + 1, self.rank)]
        index = [("index", batch + k) for k in range(n)]
        return (*(("carried", a) for a in range(axis)), *index, *carried_after)

    def result_axes(self, operand: int) -> list[int | None]:
        return [None if kind == "index" else a for kind, a in self.roles(operand)]

    def index_axes(self, operand: int) -> frozenset[int]:
        return frozenset(i for i, (kind, _) in enumerate(self.roles(operand)) if kind == "index")


def scatter_reading(axis: int, batch_dims: int, x_rank: int, indices_rank: int) -> ScatterReading:
    return ScatterReading(axis % x_rank, batch_dims, indices_rank - batch_dims, x_rank)


@dataclass(frozen=True)
class ScatterPlacement:
    """The result's ShardLayout and the mesh axes along which a replicated `x` / `updates` is
    counted on the first device only (the result is Partial(sum) there)."""

    layout: ShardLayout | None
    x_first: tuple[int, ...] = ()
    updates_first: tuple[int, ...] = ()


_NAMES = ("x", "indices", "updates")


def scatter_placement(reading: ScatterReading, x: TensorType, indices: TensorType, updates):
    """The result's placement for these operand types, or the VerifyError naming the fix."""
    operands = (x, indices, updates)
    layouts = [t.layout for t in operands if isinstance(t.layout, ShardLayout)]
    real = [sl for sl in layouts if any(not isinstance(a, Broadcast) for a in sl.attrs)]
    if not real:
        return ScatterPlacement(None)
    mesh = real[0].mesh
    if any(sl.mesh != mesh for sl in real):
        raise VerifyError(
            "ScatterAdd: its operands are sharded over different meshes; reshard "
            "them onto one mesh first"
        )
    for name, sl in zip(_NAMES, (t.layout for t in operands), strict=True):
        for m, attr in enumerate(sl.attrs if isinstance(sl, ShardLayout) else ()):
            if not isinstance(attr, Split | Broadcast | Partial):
                raise VerifyError(
                    f"ScatterAdd: operand '{name}' is {type(attr).__name__} on "
                    f"{mesh_axis_label(mesh, m)}; "
                    f"resolve it with reshard({name}, ...) to Split or Broadcast first"
                )
    owner, split_by = _split_owners(operands, reading, mesh)
    pending = [pending_partials(t) for t in operands]
    _refuse_partials(pending, mesh)
    attrs = []
    for m in range(mesh.rank):
        role = owner.get(m)
        summed = [name for name, p in zip(_NAMES, pending, strict=True) if m in p]
        if role is not None and role[0] != "index":
            if summed:
                raise VerifyError(
                    f"ScatterAdd: operand '{summed[0]}' carries Partial(sum) on "
                    f"{mesh_axis_label(mesh, m)}, which also splits the {role[0]} axis {role[1]}; "
                    f"a pending sum has no block there — insert reshard({summed[0]}, ...) to "
                    f"Broadcast on {mesh_axis_label(mesh, m)} first"
                )
            attrs.append(Split(role[1]))
        else:
            attrs.append(Partial("sum") if role is not None or summed else B)
    layout = canonical_shard_layout(tuple(x.shape), mesh, tuple(attrs))
    _check_canonical(TensorType(x.shape, x.dtype, layout), split_by, mesh)
    sums = [m for m, a in enumerate(attrs) if isinstance(a, Partial)]
    return ScatterPlacement(
        layout,
        tuple(m for m in sums if m not in pending[0]),
        tuple(m for m in sums if m not in pending[2] and m not in owner),
    )


def _split_owners(operands, reading: ScatterReading, mesh):
    """Mesh axis -> the role it splits, and role -> its splitting mesh axes, outermost first;
    one role per mesh axis, split alike by every operand that splits it."""
    owner: dict[int, tuple[str, int]] = {}
    split_by: dict[tuple[str, int], tuple[int, ...]] = {}
    splitters: dict[tuple[str, int], set[str]] = {}
    for index, (name, type_) in enumerate(zip(_NAMES, operands, strict=True)):
        roles = reading.roles(index)
        for logical, mesh_axes in canonical_splits(type_, f"ScatterAdd: '{name}'", _RULE).items():
            role = roles[logical]
            labels = ", ".join(mesh_axis_label(mesh, m) for m in mesh_axes)
            if split_by.setdefault(role, mesh_axes) != mesh_axes or any(
                owner.setdefault(m, role) != role for m in mesh_axes
            ):
                raise VerifyError(
                    f"ScatterAdd: operand '{name}' is split along its axis {logical} over "
                    f"{labels}, which the other operands split differently (another position, "
                    "or other mesh axes); split every operand alike, or insert "
                    f"reshard({name}, ...) to Broadcast on {labels}"
                )
            splitters.setdefault(role, set()).add(name)
    for role, names in splitters.items():
        if role[0] == "index" and names != {"indices", "updates"}:
            raise VerifyError(
                f"ScatterAdd: only '{next(iter(names))}' is split along index position "
                f"{role[1]} of 'indices'; split 'indices' and 'updates' alike there (each "
                "device scatters its own updates at its own indices)"
            )
    return owner, split_by


def _refuse_partials(pending, mesh) -> None:
    for name, partials in zip(_NAMES, pending, strict=True):
        for m, reduction in partials.items():
            if name == "indices" or reduction != "sum":
                why = (
                    "positions have no addends"
                    if name == "indices"
                    else "a pending max/min does not commute with adding the updates"
                )
                raise VerifyError(
                    f"ScatterAdd: operand '{name}' carries Partial({reduction}) on "
                    f"{mesh_axis_label(mesh, m)}, and {why}; insert reshard({name}, ...) to "
                    f"Broadcast on {mesh_axis_label(mesh, m)} first"
                )


def _check_canonical(out: TensorType, split_by, mesh) -> None:
    held = canonical_splits(out, "ScatterAdd", _RULE)
    for role, mesh_axes in split_by.items():
        if role[0] != "index" and held.get(role[1]) != mesh_axes:
            labels = ", ".join(mesh_axis_label(mesh, m) for m in mesh_axes)
            raise VerifyError(
                f"ScatterAdd: axis {role[1]} is split over {labels} in an order that is not "
                "the canonical one (mesh-axis order); reshard the operands to the canonical "
                "layout first"
            )
