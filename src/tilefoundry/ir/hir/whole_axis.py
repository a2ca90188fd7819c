"""Relations of ops that read a whole axis at once (SoftMax, LayerNorm, RMSNorm, RoPE, Conv2D).

hir §1.3 RMSNorm fixes how such a relation is stated: the normalised axis "MUST stay inside a
single op instance: it is never an iteration-domain axis of its own, only an existential range
that both the read and the write cover in full". So the iteration domain is the value's *other*
axes, and each boundary reads the whole axis through a free (existential) output variable:
`{ [d0, d1] -> [d0, d1, w2] }`.

The shared propagation engine reads only single-valued maps. Its answer is still well defined
once no input is Split along a whole axis (which these ops refuse first: a device holding part of
an axis cannot compute over all of it), so the engine is given the same maps with the free
variable pinned to 0 (`exists=False`), which binds no domain dim.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import islpy as isl

from tilefoundry.analysis.access_relation import AccessRelations, AffineAccess, BoundaryRelation
from tilefoundry.caches import memoize
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op
from tilefoundry.ir.hir.op_support import mesh_axis_label, op_name, split_owners
from tilefoundry.ir.types import TensorType

Reads = tuple[int | None, ...]
"""Per value axis, the domain dim it reads as a projection, or None for a whole (free) axis."""


@memoize("whole-axis row accesses", 1024)
def _row_access(domain_rank: int, reads: Reads, exists: bool) -> AffineAccess:
    dims = ", ".join(f"d{i}" for i in range(domain_rank))
    free = [f"w{i}" if exists else "0" for i in range(len(reads))]
    exprs = [free[i] if dim is None else f"d{dim}" for i, dim in enumerate(reads)]
    return AffineAccess(isl.Map(f"{{ [{dims}] -> [{', '.join(exprs)}] }}"))


def whole_axis_relations(
    domain_rank: int, inputs: Sequence[Reads], outputs: Sequence[Reads], *, exists: bool = True
) -> AccessRelations:
    """Boundaries whose None axes are covered in full by every domain point (`exists=True`, the
    registered relation), or pinned to 0 (`exists=False`, the engine's shard view)."""

    def boundary(reads: Reads) -> BoundaryRelation:
        return BoundaryRelation(_row_access(domain_rank, tuple(reads), exists))

    return AccessRelations(tuple(boundary(r) for r in inputs), tuple(boundary(r) for r in outputs))


def reads_except(rank: int, whole: Collection[int]) -> Reads:
    """Reads of a value whose `whole` axes are free and whose others are the domain, in order."""
    reads: list[int | None] = []
    next_dim = 0
    for axis in range(rank):
        if axis in whole:
            reads.append(None)
        else:
            reads.append(next_dim)
            next_dim += 1
    return tuple(reads)


def split_logical_axes(op: Op, name: str, type_: TensorType) -> dict[int, int]:
    """Mesh axis -> logical axis of every Split on operand `name` (empty when not sharded)."""
    owners = split_owners(f"{op_name(op)}: operand '{name}'", type_)
    return {mesh_axis: owner[0] for mesh_axis, owner in owners.items()}


def refuse_splits_on(
    op: Op, operands: Iterable[tuple[str, TensorType, Collection[int]]], why: str
) -> None:
    """Refuse a Split along any listed logical axis of an operand; `why` says what that axis is."""
    for name, type_, axes in operands:
        for mesh_axis, axis in split_logical_axes(op, name, type_).items():
            if axis in axes:
                label = mesh_axis_label(type_.layout.mesh, mesh_axis)
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' is Split on {label} along axis {axis}, "
                    f"and {why}; insert reshard({name}, ...) to Broadcast on {label} first"
                )
