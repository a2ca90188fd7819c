"""Access relations: the boundary model of typeinfer, shard propagation, dependence, movement.

Every boundary of an op (each input argument, each output) carries an isl map from the op's whole
iteration space to that value's *logical* coordinates (visitor-registry §4.1). The maps the helpers
below build are *structural*: they state which domain dim each axis reads and carry no bounds,
because the consumers (semantic-analysis §1.1, §3.2) must read the affine structure alone, and isl
folds an access into a constant as soon as bounds make it one. Bounds, where a consumer needs the
image (cost, movement), are added afterwards by `iterating`.

isl parsing costs about a quarter of a millisecond, and typeinfer asks for relations on every node,
so the text-to-map step and every helper are memoised on their (hashable) shape arguments.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import islpy as isl

from tilefoundry.analysis.access_structure import AxisAccess, map_axes
from tilefoundry.caches import memoize
from tilefoundry.errors import VerifyError

__all__ = [
    "AccessRelations",
    "AffineAccess",
    "BoundaryRelation",
    "broadcast_access",
    "broadcast_shapes",
    "contraction_relations",
    "domain_rank",
    "elementwise_relations",
    "identity_access",
    "iterating",
    "linearized_view",
    "permutation_access",
    "reduction_dims",
    "reduction_relations",
]

_CACHE_SIZE = 4096


@dataclass(frozen=True)
class AffineAccess:
    """One boundary's access map plus the value behind every isl parameter it mentions.

    isl only knows parameter *names*; the binding ties each name to the IR value it stands for (a
    DimVar, a dim expression, an operand element), so two maps that share a name share a value.
    """

    relation: isl.Map
    parameters: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        if not isinstance(self.relation, isl.Map):
            raise VerifyError(
                f"access relation: an AffineAccess holds an isl.Map, not "
                f"{type(self.relation).__name__}; wrap a BasicMap or MultiAff with isl.Map(...)"
            )
        names = [name for name, _ in self.parameters]
        if len(set(names)) != len(names):
            raise VerifyError(f"access relation: parameter bound twice in {names}")
        values = [value for _, value in self.parameters]
        for i, value in enumerate(values):
            if any(_same_value(value, other) for other in values[:i]):
                raise VerifyError(
                    f"access relation: {value!r} is bound to two isl parameters; one value has "
                    "one name, otherwise isl treats the two as independent"
                )
        used = set(self.relation.get_var_names(isl.dim_type.param))
        if used != set(names):
            raise VerifyError(
                f"access relation: isl parameters {sorted(used)} of {self.relation} must be bound "
                f"exactly, got bindings for {sorted(names)}"
            )

    @property
    def domain_rank(self) -> int:
        return self.relation.dim(isl.dim_type.in_)

    @property
    def rank(self) -> int:
        """The rank of the value this boundary indexes (the image's rank)."""
        return self.relation.dim(isl.dim_type.out)

    @cached_property
    def axes(self) -> tuple[AxisAccess, ...]:
        """Structural reading of each value axis; cached because propagation asks repeatedly."""
        return map_axes(self.relation)


@dataclass(frozen=True)
class BoundaryRelation:
    """A boundary's pattern; only an `AffineAccess` is accepted (a bare map has no bindings)."""

    pattern: AffineAccess

    def __post_init__(self):
        if not isinstance(self.pattern, AffineAccess):
            raise VerifyError(
                f"access relation: a boundary pattern must be an AffineAccess, not "
                f"{type(self.pattern).__name__}"
            )


@dataclass(frozen=True)
class AccessRelations:
    """One boundary per input argument (in argument order) and per output (per TupleType field)."""

    inputs: tuple[BoundaryRelation, ...]
    outputs: tuple[BoundaryRelation, ...]

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not self.outputs:
            raise VerifyError("access relation: an op has at least one output boundary")
        boundaries = self.inputs + self.outputs
        for boundary in boundaries:
            if not isinstance(boundary, BoundaryRelation):
                raise VerifyError(
                    f"access relation: boundaries are BoundaryRelation objects, not "
                    f"{type(boundary).__name__}"
                )
        ranks = {b.pattern.domain_rank for b in boundaries}
        if len(ranks) != 1:
            raise VerifyError(
                f"access relation: every boundary maps from the one iteration space, but the "
                f"domain ranks differ: {sorted(ranks)}"
            )
        bound: dict[str, object] = {}
        for boundary in boundaries:
            for name, value in boundary.pattern.parameters:
                if name in bound and not _same_value(bound[name], value):
                    raise VerifyError(
                        f"access relation: isl parameter {name!r} names {bound[name]!r} in one "
                        f"boundary and {value!r} in another; one name is one value"
                    )
                bound[name] = value

    @property
    def domain_rank(self) -> int:
        return self.outputs[0].pattern.domain_rank


def domain_rank(relations: AccessRelations) -> int:
    return relations.domain_rank


def reduction_dims(relations: AccessRelations) -> frozenset[int]:
    """Domain dims that no output map reads in any form (semantic-analysis §1.1)."""
    read: set[int] = set()
    for boundary in relations.outputs:
        for axis in boundary.pattern.axes:
            read |= axis.dims
    return frozenset(range(relations.domain_rank)) - read


# ---------------------------------------------------------------------------------------------
# Building maps


@memoize("access relations: parsed isl maps", _CACHE_SIZE)
def _parse(text: str) -> isl.Map:
    return isl.Map(text)


def _access(domain_rank: int, exprs: Sequence[str]) -> AffineAccess:
    dims = ", ".join(f"d{i}" for i in range(domain_rank))
    return AffineAccess(_parse(f"{{ [{dims}] -> [{', '.join(exprs)}] }}"))


def _is_static(extent: object) -> bool:
    return isinstance(extent, int) and not isinstance(extent, bool)


def _same_value(a: object, b: object) -> bool:
    """Extent/binding equality that never lets a symbolic `==` overload answer with a non-bool."""
    if a is b:
        return True
    if _is_static(a) and _is_static(b):
        return a == b
    if _is_static(a) or _is_static(b):
        return False
    result = a == b
    return result if isinstance(result, bool) else False


def _rank_and_shape(out: int | Sequence[object]) -> tuple[int, tuple[object, ...] | None]:
    if isinstance(out, int):
        return out, None
    return len(out), tuple(out)


@memoize("access relations: identity_access", _CACHE_SIZE)
def identity_access(rank: int) -> AffineAccess:
    return _access(rank, [f"d{i}" for i in range(rank)])


def _broadcast_exprs(out: int | tuple[object, ...], operand_shape: tuple[object, ...]) -> list[str]:
    out_rank, out_shape = _rank_and_shape(out)
    lead = out_rank - len(operand_shape)
    if lead < 0:
        raise VerifyError(
            f"access relation: operand of rank {len(operand_shape)} cannot broadcast to rank "
            f"{out_rank}"
        )
    exprs = []
    for i, extent in enumerate(operand_shape):
        out_extent = None if out_shape is None else out_shape[lead + i]
        size_one = _is_static(extent) and extent == 1
        kept = _is_static(out_extent) and out_extent == 1
        exprs.append("0" if size_one and not kept else f"d{lead + i}")
    return exprs


@memoize("access relations: broadcast_access", _CACHE_SIZE)
def _broadcast_access(out: int | tuple[object, ...], operand_shape: tuple[object, ...]):
    return _access(out if isinstance(out, int) else len(out), _broadcast_exprs(out, operand_shape))


def broadcast_access(out: int | Sequence[object], operand_shape: Sequence[object]) -> AffineAccess:
    """Torch (right-aligned) broadcasting: a size-1 operand axis reads the constant 0."""
    out_key = out if isinstance(out, int) else tuple(out)
    return _broadcast_access(out_key, tuple(operand_shape))


@memoize("access relations: permutation_access", _CACHE_SIZE)
def _permutation_access(perm: tuple[int, ...]) -> AffineAccess:
    if sorted(perm) != list(range(len(perm))):
        raise VerifyError(f"access relation: {perm} is not a permutation")
    inverse = [0] * len(perm)
    for out_axis, in_axis in enumerate(perm):
        inverse[in_axis] = out_axis
    return _access(len(perm), [f"d{inverse[i]}" for i in range(len(perm))])


def permutation_access(perm: Sequence[int]) -> AffineAccess:
    """Transpose operand map: the domain is the output's coordinates, `out[j] = x[perm[j]]`."""
    return _permutation_access(tuple(perm))


def broadcast_shapes(*shapes: Sequence[object]) -> tuple[object, ...]:
    """Torch broadcast shape; two distinct symbolic extents are refused (not provably equal)."""
    rank = max((len(s) for s in shapes), default=0)
    result: list[object] = [1] * rank
    for shape in shapes:
        for i, extent in enumerate(shape, start=rank - len(shape)):
            if _is_static(extent) and extent == 1:
                continue
            if _is_static(result[i]) and result[i] == 1:
                result[i] = extent
            elif not _same_value(result[i], extent):
                raise VerifyError(
                    f"access relation: shapes {[tuple(s) for s in shapes]} do not broadcast "
                    f"(axis {i}: {result[i]!r} vs {extent!r})"
                )
    return tuple(result)


@memoize("access relations: elementwise_relations", _CACHE_SIZE)
def _elementwise_relations(out_shape: tuple, in_shapes: tuple) -> AccessRelations:
    out = identity_access(len(out_shape))
    inputs = tuple(BoundaryRelation(broadcast_access(out_shape, s)) for s in in_shapes)
    return AccessRelations(inputs, (BoundaryRelation(out),))


def elementwise_relations(
    n_inputs: int, out_shape: Sequence[object], in_shapes: Sequence[Sequence[object]]
) -> AccessRelations:
    """Domain = output coordinates; each input broadcasts into it, the output is the identity."""
    if n_inputs != len(in_shapes):
        raise VerifyError(f"access relation: {n_inputs} inputs but {len(in_shapes)} shapes")
    return _elementwise_relations(tuple(out_shape), tuple(tuple(s) for s in in_shapes))


@memoize("access relations: reduction_relations", _CACHE_SIZE)
def _reduction_relations(rank: int, axes: tuple[int, ...], keepdim: bool) -> AccessRelations:
    reduced = set()
    for axis in axes:
        if not -rank <= axis < rank:
            raise VerifyError(f"access relation: reduction axis {axis} out of range for {rank}")
        reduced.add(axis % rank)
    if keepdim:
        exprs = ["0" if i in reduced else f"d{i}" for i in range(rank)]
    else:
        exprs = [f"d{i}" for i in range(rank) if i not in reduced]
    inputs = (BoundaryRelation(identity_access(rank)),)
    return AccessRelations(inputs, (BoundaryRelation(_access(rank, exprs)),))


def reduction_relations(rank: int, axes: Sequence[int], keepdim: bool) -> AccessRelations:
    """Domain = input coordinates; reduced axes vanish from (or read 0 in) the output map."""
    return _reduction_relations(rank, tuple(axes), bool(keepdim))


@memoize("access relations: contraction_relations", _CACHE_SIZE)
def _contraction_relations(lhs_shape: tuple, rhs_shape: tuple) -> AccessRelations:
    if len(lhs_shape) < 2 or len(rhs_shape) < 2:
        raise VerifyError(
            "access relation: contraction operands have rank >= 2 (reshape a vector to a "
            "one-row / one-column matrix first)"
        )
    batch = broadcast_shapes(lhs_shape[:-2], rhs_shape[:-2])
    nb = len(batch)
    m, n, k = f"d{nb}", f"d{nb + 1}", f"d{nb + 2}"

    def operand(shape: tuple, inner: list[str]) -> AffineAccess:
        return _access(nb + 3, _broadcast_exprs(batch, shape[:-2]) + inner)

    lhs = operand(lhs_shape, [m, k])
    rhs = operand(rhs_shape, [k, n])
    out = _access(nb + 3, [f"d{i}" for i in range(nb)] + [m, n])
    return AccessRelations((BoundaryRelation(lhs), BoundaryRelation(rhs)), (BoundaryRelation(out),))


def contraction_relations(lhs_shape: Sequence[object], rhs_shape: Sequence[object]):
    """Matmul: domain `[batch..., M, N, K]`; lhs `[.., M, K]`, rhs `[.., K, N]`, out `[.., M, N]`.

    The batch dims broadcast like torch, so a size-1 batch axis of one operand reads 0.
    """
    return _contraction_relations(tuple(lhs_shape), tuple(rhs_shape))


def _view_segments(out_shape: tuple, in_shape: tuple) -> list[tuple[list[int], list[int]]]:
    """Pair up runs of output and input axes whose extents multiply to the same size.

    Aligned runs keep reshape structure local: an axis carried through unchanged stays a projection
    instead of becoming a floor/mod of the whole linear index, which propagation could not read.
    Static size-1 axes take part in no run: they are read at 0 and contribute nothing.
    """
    outs_left = [i for i, e in enumerate(out_shape) if not (_is_static(e) and e == 1)]
    ins_left = [j for j, e in enumerate(in_shape) if not (_is_static(e) and e == 1)]
    segments: list[tuple[list[int], list[int]]] = []
    while outs_left and ins_left:
        outs, ins = [outs_left.pop(0)], [ins_left.pop(0)]
        pa, pb = out_shape[outs[0]], in_shape[ins[0]]
        if _same_value(pa, pb):
            segments.append((outs, ins))
            continue
        while not (_is_static(pa) and _is_static(pb) and pa == pb):
            if not (_is_static(pa) and _is_static(pb)):
                raise VerifyError(
                    f"access relation: reshape {in_shape} -> {out_shape} regroups a symbolic "
                    "extent; only a symbolic axis carried through unchanged is supported"
                )
            if pa < pb and outs_left:
                outs.append(outs_left.pop(0))
                pa *= out_shape[outs[-1]]
            elif pb < pa and ins_left:
                ins.append(ins_left.pop(0))
                pb *= in_shape[ins[-1]]
            else:
                break
        if not (_is_static(pa) and _is_static(pb) and pa == pb):
            break
        segments.append((outs, ins))
    else:
        if not outs_left and not ins_left:
            return segments
    raise VerifyError(f"access relation: reshape {in_shape} -> {out_shape} changes the size")


@memoize("access relations: linearized_view", _CACHE_SIZE)
def _linearized_view(out_shape: tuple, in_shape: tuple) -> AffineAccess:
    exprs = ["0"] * len(in_shape)
    for outs, ins in _view_segments(out_shape, in_shape):
        if len(outs) == 1 and len(ins) == 1 and _same_value(out_shape[outs[0]], in_shape[ins[0]]):
            exprs[ins[0]] = f"d{outs[0]}"
            continue
        terms, stride = [], 1
        for axis in reversed(outs):
            terms.append(f"{stride}*d{axis}")
            stride *= out_shape[axis]
        linear = " + ".join(terms) or "0"
        stride = 1
        for position, axis in enumerate(reversed(ins)):
            extent = in_shape[axis]
            outermost = position == len(ins) - 1
            value = linear if stride == 1 else f"floor(({linear})/{stride})"
            exprs[axis] = value if outermost else f"({value}) mod {extent}"
            stride *= extent
    return _access(len(out_shape), exprs)


def linearized_view(out_shape: Sequence[object], in_shape: Sequence[object]) -> AffineAccess:
    """Reshape's operand map: the domain is the output coordinates (row-major relinearisation)."""
    return _linearized_view(tuple(out_shape), tuple(in_shape))


# ---------------------------------------------------------------------------------------------
# Bounding the iteration space


def _param_name(value: object, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", str(getattr(value, "name", "") or "p"))
    if not base[0].isalpha():
        base = f"p_{base}"
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def iterating(relations: AccessRelations, extents: Sequence[object]) -> AccessRelations:
    """Restrict every boundary to the domain `0 <= d_i < extents[i]`.

    Symbolic extents become isl parameters bound to the extent value; the bounded maps are for
    consumers of the image (cost, movement). Structural readers take the unbounded maps, because
    isl folds an axis to a constant once bounds pin it.
    """
    if len(extents) != relations.domain_rank:
        raise VerifyError(
            f"access relation: {len(extents)} extents for a domain of rank {relations.domain_rank}"
        )
    bindings: list[tuple[str, object]] = []
    for boundary in relations.inputs + relations.outputs:
        for name, value in boundary.pattern.parameters:
            if all(name != n for n, _ in bindings):
                bindings.append((name, value))
    taken = {name for name, _ in bindings}
    bounds = []
    for i, extent in enumerate(extents):
        if _is_static(extent):
            bounds.append(f"0 <= d{i} < {extent}")
            continue
        name = next((n for n, v in bindings if _same_value(v, extent)), None)
        if name is None:
            name = _param_name(extent, taken)
            bindings.append((name, extent))
        bounds.append(f"0 <= d{i} < {name}")
    params = ", ".join(name for name, _ in bindings)
    dims = ", ".join(f"d{i}" for i in range(len(extents)))
    domain = isl.Set(f"[{params}] -> {{ [{dims}] : {' and '.join(bounds) or 'true'} }}")

    def bound(boundary: BoundaryRelation) -> BoundaryRelation:
        relation = boundary.pattern.relation.intersect_domain(domain)
        used = set(relation.get_var_names(isl.dim_type.param))
        return BoundaryRelation(
            AffineAccess(relation, tuple((n, v) for n, v in bindings if n in used))
        )

    return AccessRelations(
        tuple(bound(b) for b in relations.inputs), tuple(bound(b) for b in relations.outputs)
    )
