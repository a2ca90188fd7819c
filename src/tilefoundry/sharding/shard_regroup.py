"""Canonical regroup (semantic-analysis §3.1) between a logical shape and a layout domain.

A ShardLayout's domain need not match the logical shape: both linearise row-major, and a layout
position belongs to a logical axis when its digit of the linear index is a digit of that axis
alone. Propagation needs that correspondence twice: to find the logical axis behind a `Split(k)`,
and to lay the same factors out again on the output axis the split reaches.
"""

from __future__ import annotations

from tilefoundry.errors import VerifyError


def _static(extent: object) -> bool:
    return isinstance(extent, int) and not isinstance(extent, bool)


def _same(a: object, b: object) -> bool:
    """Extent equality that never lets a symbolic `==` overload answer with a non-bool."""
    if _static(a) or _static(b):
        return _static(a) and _static(b) and a == b
    result = a is b or a == b
    return result if isinstance(result, bool) else False


def logical_groups(logical_shape: tuple, layout_shape: tuple) -> list[tuple[int, ...] | None]:
    """Per logical axis, the contiguous layout positions that factor it (None once misaligned).

    A static size-1 logical axis owns the size-1 position in its place, if there is one. A
    symbolic extent aligns only with the very same extent on one position, because nothing
    about its factors is known.
    """
    groups: list[tuple[int, ...] | None] = []
    k, aligned = 0, True
    for extent in logical_shape:
        if not aligned:
            groups.append(None)
            continue
        if _static(extent) and extent == 1:
            takes = k < len(layout_shape) and _same(layout_shape[k], 1)
            groups.append((k,) if takes else ())
            k += takes
            continue
        if k < len(layout_shape) and _same(layout_shape[k], extent):
            groups.append((k,))
            k += 1
            continue
        members, product = [], 1
        while _static(extent) and product != extent and k < len(layout_shape):
            part = layout_shape[k]
            if not (_static(part) and extent % (product * part) == 0):
                break
            members.append(k)
            product, k = product * part, k + 1
        aligned = _static(extent) and product == extent
        groups.append(tuple(members) if aligned else None)
    return groups


def logical_axis_of(
    logical_shape: tuple, layout_shape: tuple, position: int, operand: str, label: str
) -> tuple[int, tuple[int, ...]]:
    """The logical axis whose factors include layout `position`, with all of its positions;
    `operand` names the value in a refusal ("operand 'x'")."""
    for axis, group in enumerate(logical_groups(tuple(logical_shape), tuple(layout_shape))):
        if group is not None and position in group:
            return axis, group
    raise VerifyError(
        f"shard propagation (semantic-analysis §3.1 canonical regroup, §3.2 rule 1): {operand} "
        f"is Split on {label} at layout position {position} of {tuple(layout_shape)}, "
        f"which does not factor a single axis of the logical shape {tuple(logical_shape)}; "
        f"insert reshard(x, Broadcast) on {operand} or reshard it to a canonical layout first"
    )


def carried_factors(
    factors: tuple, splits: frozenset[tuple[int, int]], extent: object, label: str
) -> tuple[tuple, dict[int, int]]:
    """Factor an output axis of `extent` like the input factored the split's source axis.

    The input's factors carry verbatim when they multiply to `extent`, which keeps an identity-
    shaped relation's layout unchanged. Otherwise only splits on the outermost factors survive, as
    the canonical `(mesh extents..., residual)` form; a split on an inner factor has no meaning
    on an axis of another extent and fails closed.
    """
    offsets = {mesh_axis: offset for offset, mesh_axis in splits}
    product: object = 1
    for part in factors:
        product = product * part if _static(product) and _static(part) else None
    if (len(factors) == 1 and _same(factors[0], extent)) or (
        product is not None and _static(extent) and product == extent
    ):
        return tuple(factors), offsets
    outer = sorted(offsets.values())
    if outer == list(range(len(outer))) and _static(extent):
        split_extent = 1
        for offset in outer:
            split_extent *= factors[offset]
        if extent % split_extent == 0:
            residual = extent // split_extent
            canonical = tuple(factors[o] for o in outer)
            return canonical + ((residual,) if residual != 1 else ()), offsets
    raise VerifyError(
        f"shard propagation (semantic-analysis §3.2 rule 2): the input factors {tuple(factors)} "
        f"split on {label} cannot be carried onto an output axis of extent {extent!r}; only a "
        "split on the outermost factors of an axis re-factors canonically (and it must divide); "
        "insert reshard(x, Broadcast) on the input, or reshard it to a canonical layout first"
    )
