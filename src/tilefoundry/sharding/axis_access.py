"""How one op instance reads and writes each value axis, as a block plan needs it.

A block plan (`block_plan`) partitions the domain dims that input Splits bind to mesh axes, so
it needs, per value axis, which domain dim it reads and whether as a plain projection. Some
relations are not single-valued on purpose (a normalisation reads its whole last axis through a
free variable, hir §1.3 RMSNorm); such an axis reads no domain dim and is held whole by every
instance, so it is classified axis by axis instead of failing the whole map.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from tilefoundry.analysis.access_relation import AccessRelations, AffineAccess
from tilefoundry.analysis.access_structure import AxisAccess, map_axes
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Op
from tilefoundry.rules import ACCESS_RELATION


@dataclass(frozen=True)
class WholeAxis:
    """The axis is read in full by every instance (an existential range, no domain dim)."""

    @property
    def dims(self) -> frozenset[int]:
        return frozenset()


def relations_for(op: Op, arg_types: tuple) -> AccessRelations | None:
    """The op's registered relation; None when it declares none (NO_AFFINE_RELATION)."""
    if not ACCESS_RELATION.has(type(op)):
        return None
    try:
        return ACCESS_RELATION.lookup(type(op))(op, arg_types)
    except VerifyError as err:
        raise UnsupportedError(
            f"{type(op).__name__}: its access relation cannot be built for the mesh simulation: "
            f"{err.message}"
        ) from None


def axis_accesses(access: AffineAccess) -> tuple[AxisAccess | WholeAxis, ...]:
    """Each value axis's structural access; a not-single-valued axis is a WholeAxis."""
    try:
        return access.axes
    except VerifyError:
        pass
    relation, out = access.relation, isl.dim_type.out
    rank = relation.dim(out)
    result: list[AxisAccess | WholeAxis] = []
    for axis in range(rank):
        single = relation.project_out(out, axis + 1, rank - axis - 1).project_out(out, 0, axis)
        try:
            result.append(map_axes(single)[0])
        except VerifyError:
            result.append(WholeAxis())
    return tuple(result)
