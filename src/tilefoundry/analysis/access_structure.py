"""Structural reading of access maps: which domain dims each value axis reads, and how.

Propagation and reduction detection (semantic-analysis §1.1, §3.2) depend only on the *form* of
each axis of a map — a plain projection of one domain dim, a constant, a translated or scaled
affine expression, a floor/mod (quasi-affine) expression, or a piecewise one — never on bounds, so
the rule is the same for static and symbolic shapes. A floor/mod lives in an isl *div*; its
coefficients on the domain dims are zero, so a reader that looked only at those coefficients would
misread `floor(i/4)` as a constant. Every div is therefore inspected first.
"""

from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from tilefoundry.errors import VerifyError

__all__ = [
    "AffineAxis",
    "AxisAccess",
    "ConstantAxis",
    "PiecewiseAxis",
    "Projection",
    "QuasiAffineAxis",
    "map_axes",
]

_dt = isl.dim_type


@dataclass(frozen=True)
class Projection:
    """`axis = d<dim>`: zero offset, unit coefficient, no parameter — the only shareable access."""

    dim: int

    @property
    def dims(self) -> frozenset[int]:
        return frozenset((self.dim,))


@dataclass(frozen=True)
class ConstantAxis:
    """`axis = c`: the value is read at one index on this axis (a broadcast axis)."""

    value: int

    @property
    def dims(self) -> frozenset[int]:
        return frozenset()


@dataclass(frozen=True)
class AffineAxis:
    """Any other affine form: translated, scaled, a sum of dims, or offset by a parameter."""

    coefficients: tuple[int, ...]
    parameter_coefficients: tuple[tuple[str, int], ...]
    constant: int

    @property
    def dims(self) -> frozenset[int]:
        return frozenset(i for i, c in enumerate(self.coefficients) if c)


@dataclass(frozen=True)
class QuasiAffineAxis:
    """An expression with floor/mod (an isl div), e.g. a reshape's relinearisation."""

    dims: frozenset[int]
    text: str


@dataclass(frozen=True)
class PiecewiseAxis:
    """Different expressions on different parts of the domain (or none: an empty map)."""

    dims: frozenset[int]
    pieces: int


AxisAccess = Projection | ConstantAxis | AffineAxis | QuasiAffineAxis | PiecewiseAxis


def _value(val: isl.Val) -> int:
    return val.to_python()


def _aff_dims(aff: isl.Aff) -> frozenset[int]:
    """Domain dims an affine expression depends on, through its divs as well."""
    dims = {i for i in range(aff.dim(_dt.in_)) if not aff.get_coefficient_val(_dt.in_, i).is_zero()}
    for j in range(aff.dim(_dt.div)):
        if not aff.get_coefficient_val(_dt.div, j).is_zero():
            dims |= _aff_dims(aff.get_div(j))
    return frozenset(dims)


def _classify(aff: isl.Aff) -> AxisAccess:
    if aff.dim(_dt.div) > 0 or not aff.get_denominator_val().is_one():
        return QuasiAffineAxis(_aff_dims(aff), str(aff))
    coefficients = tuple(
        _value(aff.get_coefficient_val(_dt.in_, i)) for i in range(aff.dim(_dt.in_))
    )
    params = tuple(
        (aff.get_dim_name(_dt.param, i), _value(aff.get_coefficient_val(_dt.param, i)))
        for i in range(aff.dim(_dt.param))
    )
    params = tuple((name, c) for name, c in params if c)
    constant = _value(aff.get_constant_val())
    used = [i for i, c in enumerate(coefficients) if c]
    if not used and not params:
        return ConstantAxis(constant)
    if len(used) == 1 and coefficients[used[0]] == 1 and constant == 0 and not params:
        return Projection(used[0])
    return AffineAxis(coefficients, params, constant)


def map_axes(relation: isl.Map) -> tuple[AxisAccess, ...]:
    """Classify every output axis of a single-valued map; anything else fails closed."""
    try:
        pma = relation.as_pw_multi_aff()
    except isl.Error as err:
        raise VerifyError(
            f"access relation: {relation} is not a function of the iteration space (not "
            f"single-valued), so its axes have no structural reading: {err}"
        ) from None
    axes: list[AxisAccess] = []
    for i in range(pma.dim(_dt.out)):
        pieces = pma.get_at(i).get_pieces()
        if len(pieces) == 1:
            axes.append(_classify(pieces[0][1]))
        else:
            dims = frozenset().union(*(_aff_dims(aff) for _, aff in pieces))
            axes.append(PiecewiseAxis(dims, len(pieces)))
    return tuple(axes)
