"""The layout hierarchy's pure members and the CuTe layout algebra (shard-layout §2–§4).

`Layout` mirrors `pycute.Layout` (shape + stride, no offset); `ComposedLayout` is CuTeDSL's
`make_composed_layout(inner, offset, outer)`. The algebra functions (`composition`, `complement`,
`logical_divide`, ...) follow pycute's definitions so that results agree with it exactly.

Reading fixed by DESIGN §4.2: `Layout(shape)` keeps `stride=None` (un-materialised). Applying such a
layout, or feeding it to the algebra, uses pycute's column-major `prefix_product(shape)`; the
algebra always returns materialised layouts. Materialising strides for *tensors* (C-order) is the
job of the tensor/shard code, not of this module.

Printing is CuTe style without spaces, `(4,8):(8,1)`; an un-materialised stride prints as `?`
(`(4,8):?`) and a launch-provided None entry prints as `None`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.shard.int_tuple import (
    IntTuple,
    check_int_tuple,
    congruent,
    crd2idx,
    flatten,
    has_none,
    is_int,
    is_static,
    is_tuple,
    is_value,
    prefix_product,
    product,
    rank,
    require_int,
    same_value,
)

INJECTIVITY_ENUMERATION_LIMIT = 1 << 20
"""Largest domain whose injectivity is decided by enumerating images when no cheaper argument
settles it; beyond it the check refuses instead of answering wrongly."""


class LayoutBase(ABC):
    """Abstract member of the layout hierarchy; only its subclasses may enter `TensorType.layout`.

    Common contract (shard-layout §2): a stable domain `shape`, a coordinate → physical index
    mapping (`layout(coord)`), `domain_rank == rank(flatten(shape))`, and injectivity.
    `shape` is declared by annotation only so that subclasses may provide it as a dataclass field
    or as a property.
    """

    shape: IntTuple

    @abstractmethod
    def __call__(self, *coord: Any) -> Any:
        """The physical index of a domain coordinate."""

    @property
    def domain_rank(self) -> int:
        return len(flatten(self.shape))

    def size(self) -> Any:
        """Number of domain points: the shape's product (None if an extent is launch-provided)."""
        return product(self.shape)

    def cosize(self) -> int:
        """One past the largest physical index, by enumerating the (static) domain."""
        size = require_int(self.size(), f"{type(self).__name__}.cosize", "size")
        _check_enumerable(size, f"{type(self).__name__}.cosize")
        return max((self(i) for i in range(size)), default=-1) + 1

    def is_injective(self) -> bool:
        """Whether distinct domain points map to distinct indices, decided by enumeration.

        A domain whose size is not a concrete int cannot be enumerated; it is assumed injective,
        because the only such layouts are built by our own signature binding from DimVar extents
        with compact strides, and an affine map with unknown coefficients cannot be decided here.
        """
        size = self.size()
        if not is_int(size):
            return True
        _check_enumerable(size, f"{type(self).__name__}.is_injective")
        images = {self(i) for i in range(size)}
        return len(images) == size


def _check_enumerable(size: int, fn: str) -> None:
    if size > INJECTIVITY_ENUMERATION_LIMIT:
        raise VerifyError(
            f"{fn}: the domain of size {size} is too large to enumerate "
            f"(limit {INJECTIVITY_ENUMERATION_LIMIT})"
        )


def check_injective(layout: LayoutBase, what: str) -> LayoutBase:
    """Return `layout` if it is injective, else raise (shard-layout §2: no aliasing layouts).

    `what` names the caller in the message, e.g. "TensorType".
    """
    if not layout.is_injective():
        raise VerifyError(
            f"{what}: layout {layout} is not injective (distinct coordinates share a physical "
            "element); overlapping/broadcast layouts are not permitted"
        )
    return layout


class Layout(LayoutBase):
    """A pure shape:stride layout, `idx = crd2idx(coord, shape, stride)` (shard-layout §3).

    `stride=None` is un-materialised (it behaves as the column-major `prefix_product(shape)`);
    `stride=()` is a concrete rank-0 layout. Immutable, hashable, equal by value; a layout with
    `stride=None` is a different value from its materialised twin.
    """

    __slots__ = ("_shape", "_stride")

    def __init__(self, shape: IntTuple, stride: IntTuple = None):
        check_int_tuple(shape, "Layout: shape")
        for e in flatten(shape):
            if is_int(e) and e < 0:
                raise VerifyError(f"Layout: shape {_text(shape)} has the negative extent {e}")
        if stride is not None:
            check_int_tuple(stride, "Layout: stride")
            if not congruent(shape, stride):
                raise VerifyError(
                    f"Layout: shape {_text(shape)} and stride {_text(stride)} are not congruent"
                )
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_stride", stride)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Layout is immutable; cannot set {name!r}")

    @property
    def shape(self) -> IntTuple:
        return self._shape

    @property
    def stride(self) -> IntTuple:
        return self._stride

    @property
    def strides(self) -> IntTuple:
        """Alias of `stride` (the seed spells the field both ways)."""
        return self._stride

    @property
    def effective_stride(self) -> IntTuple:
        """The stride used to apply the layout: the given one, else column-major (DESIGN §4.2)."""
        return prefix_product(self._shape) if self._stride is None else self._stride

    def materialized(self) -> Layout:
        """This layout with its effective stride written out."""
        return Layout(self._shape, self.effective_stride)

    def __call__(self, *coord: Any) -> Any:
        """`L(i)`, `L(i, j)` or `L((i, j))`; an int is a colexicographic 1-D index like pycute."""
        crd = coord[0] if len(coord) == 1 else coord
        return crd2idx(crd, self._shape, self.effective_stride)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Layout):
            return NotImplemented
        return self._shape == other._shape and self._stride == other._stride

    def __hash__(self) -> int:
        return hash((Layout, self._shape, self._stride))

    def __repr__(self) -> str:
        return f"Layout({self._shape!r}, {self._stride!r})"

    def __str__(self) -> str:
        stride = "?" if self._stride is None else _text(self._stride)
        return f"{_text(self._shape)}:{stride}"

    @property
    def rank(self) -> int:
        """Number of top-level modes (pycute's `len(layout)`)."""
        return rank(self._shape)

    def __getitem__(self, i: int) -> Layout:
        """Top-level mode `i` as a materialised layout (an entry shape has the one mode 0)."""
        stride = self.effective_stride
        if is_tuple(self._shape):
            return Layout(self._shape[i], stride[i])
        if i not in (0, -1):
            raise IndexError(f"Layout: mode {i} out of range for the rank-1 layout {self}")
        return Layout(self._shape, stride)

    def modes(self) -> tuple[Layout, ...]:
        return tuple(self[i] for i in range(self.rank))

    def cosize(self) -> Any:
        """One past the largest index, `1 + sum((s - 1) * d)` (pycute's `L(size - 1) + 1`).

        For non-negative strides this is exact without enumerating; a negative stride falls back to
        enumeration so the answer is never wrong.
        """
        shapes, strides = flatten(self._shape), flatten(self.effective_stride)
        if any(is_int(d) and d < 0 for d in strides):
            return super().cosize()
        if any(is_value(s, 0) for s in shapes):
            return 0
        result: Any = 1
        for s, d in zip(shapes, strides, strict=True):
            if s is None or d is None:
                return None
            if not is_value(s, 1):
                result = result + (s - 1) * d
        return result

    def is_injective(self) -> bool:
        """Whether distinct coordinates map to distinct indices (shard-layout §2).

        Un-materialised strides are compact and always injective. Static layouts: a stride-0 mode
        of extent > 1 aliases; modes sorted by |stride| where each stride exceeds the span of the
        smaller ones are injective (the mixed-radix argument); anything else is settled by
        enumerating images. With symbolic or None entries only the fully static modes can be
        checked (a restriction of an injective map is injective); the rest is assumed injective,
        as unknown strides cannot be decided at compile time.
        """
        if self._stride is None:
            return True
        modes = [
            (s, d)
            for s, d in zip(flatten(self._shape), flatten(self._stride), strict=True)
            if not is_value(s, 1)
        ]
        if any(is_value(s, 0) for s, _ in modes):
            return True
        static = [(s, abs(d)) for s, d in modes if is_int(s) and is_int(d)]
        if any(d == 0 for _, d in static):
            return False
        if _mixed_radix(static):
            return True
        size = product(tuple(s for s, _ in static))
        _check_enumerable(size, "Layout.is_injective")
        images = {0}
        for s, d in static:
            images = {x + i * d for x in images for i in range(s)}
        return len(images) == size


def _mixed_radix(modes: list[tuple[int, int]]) -> bool:
    """Each stride (ascending) exceeds the largest offset reachable by the smaller modes."""
    span = 0
    for s, d in sorted(modes, key=lambda m: m[1]):
        if d <= span:
            return False
        span += (s - 1) * d
    return True


class ComposedLayout(LayoutBase):
    """`idx = apply(inner, offset + apply(outer, coord))`, `apply(None, v) == v` (shard-layout §4).

    `outer` is applied first (the domain side), `inner` last; either may be any LayoutBase, or None
    for the identity. The domain (shape, domain_rank) is `outer`'s when present, else `inner`'s,
    else `()`. When `outer` is None a coordinate of the domain is first turned into its
    colexicographic 1-D index (the identity layout over the domain shape), so that `offset` can be
    added to it.
    """

    __slots__ = ("_inner", "_offset", "_outer")

    def __init__(self, inner: LayoutBase | None, offset: Any = 0, outer: LayoutBase | None = None):
        for name, part in (("inner", inner), ("outer", outer)):
            if part is not None and not isinstance(part, LayoutBase):
                raise VerifyError(
                    f"ComposedLayout: {name} must be a LayoutBase or None, "
                    f"got {type(part).__name__}"
                )
        if isinstance(offset, bool) or offset is None or is_tuple(offset):
            raise VerifyError(f"ComposedLayout: offset must be an integer scalar, got {offset!r}")
        check_int_tuple(offset, "ComposedLayout: offset")
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_offset", offset)
        object.__setattr__(self, "_outer", outer)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ComposedLayout is immutable; cannot set {name!r}")

    @property
    def inner(self) -> LayoutBase | None:
        return self._inner

    @property
    def offset(self) -> Any:
        return self._offset

    @property
    def outer(self) -> LayoutBase | None:
        return self._outer

    @property
    def shape(self) -> IntTuple:
        domain = self._outer if self._outer is not None else self._inner
        return () if domain is None else domain.shape

    def __call__(self, *coord: Any) -> Any:
        crd = coord[0] if len(coord) == 1 else coord
        if self._outer is not None:
            value = self._outer(crd)
        elif is_tuple(crd):
            value = crd2idx(crd, self.shape)
        else:
            value = crd
        value = value + self._offset if not is_value(self._offset, 0) else value
        return value if self._inner is None else self._inner(value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ComposedLayout):
            return NotImplemented
        mine = (self._inner, self._offset, self._outer)
        return mine == (other._inner, other._offset, other._outer)

    def __hash__(self) -> int:
        return hash((ComposedLayout, self._inner, self._offset, self._outer))

    def __repr__(self) -> str:
        return f"ComposedLayout({self._inner!r}, {self._offset!r}, {self._outer!r})"

    def __str__(self) -> str:
        return f"{self._inner} o {self._offset} o {self._outer}"


def _text(t: IntTuple) -> str:
    """CuTe-style text of an IntTuple: no spaces, a 1-tuple without the trailing comma."""
    if is_tuple(t):
        return "(" + ",".join(_text(v) for v in t) + ")"
    return str(t)


# ---------------------------------------------------------------------------------------------
# The algebra (pycute semantics). Inputs are materialised first (stride None -> column-major);
# results are always materialised. Functions whose decisions compare or divide extents require
# static integers and refuse symbolic / launch-provided entries rather than guess.
# ---------------------------------------------------------------------------------------------


def _materialize(layout: Any, fn: str) -> Layout:
    if isinstance(layout, Layout):
        return layout.materialized()
    if isinstance(layout, LayoutBase):
        raise VerifyError(
            f"{fn}: the layout algebra is defined on Layout, got {type(layout).__name__}"
        )
    raise VerifyError(f"{fn}: expected a Layout, got {layout!r}")


def _tiler(tile: Any, fn: str) -> Layout:
    """A tiler entry: a Layout, or an extent `n` standing for the compact layout `n:1`."""
    if isinstance(tile, LayoutBase):
        return _materialize(tile, fn)
    if is_tuple(tile):
        raise VerifyError(f"{fn}: a nested tiler tuple {tile!r} must be applied mode by mode")
    check_int_tuple(tile, f"{fn}: tiler")
    return Layout(tile).materialized()


def _static(layout: Layout, fn: str) -> Layout:
    """`layout` if all its entries are concrete ints with positive extents, else a VerifyError."""
    if not (is_static(layout.shape) and is_static(layout.stride)):
        kind = "launch-provided (None)" if has_none((layout.shape, layout.stride)) else "symbolic"
        raise VerifyError(
            f"{fn}: needs static integer shape and stride; {layout} has {kind} entries"
        )
    if any(s < 1 for s in flatten(layout.shape)):
        raise VerifyError(f"{fn}: needs positive extents, {layout} has an extent below 1")
    return layout


def _from_modes(shapes: list, strides: list) -> Layout:
    """A single mode becomes an entry layout (`s:d`), several a flat tuple layout, as in pycute."""
    if len(shapes) == 1:
        return Layout(shapes[0], strides[0])
    return Layout(tuple(shapes), tuple(strides))


def _per_mode(fn_name: str, op, a: Layout, tiler: tuple) -> Layout:
    """Apply `op` to the first `len(tiler)` modes of `a` against the tiler; keep the other modes."""
    if a.rank < len(tiler):
        raise VerifyError(
            f"{fn_name}: the tiler {tiler!r} has {len(tiler)} modes, more than the rank {a.rank} "
            f"of {a}"
        )
    modes = a.modes()
    return make_layout([op(modes[i], t) for i, t in enumerate(tiler)] + list(modes[len(tiler) :]))


def make_layout(*layouts: Any) -> Layout:
    """Concatenate layouts as the modes of one layout: `make_layout(a, b)` is `(a, b)`.

    A single non-layout argument is taken as an iterable of layouts, as in pycute.
    """
    if len(layouts) == 1 and not isinstance(layouts[0], LayoutBase):
        if not isinstance(layouts[0], Iterable):
            raise VerifyError(f"make_layout: expected layouts, got {layouts[0]!r}")
        layouts = tuple(layouts[0])
    modes = [_materialize(x, "make_layout") for x in layouts]
    return Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes))


def coalesce(layout: Layout, profile: IntTuple = None) -> Layout:
    """The same function of the 1-D index with the fewest modes: drop extent-1 modes and merge
    neighbours whose strides continue each other (`s0 * d0 == d1`).

    With a tuple `profile` each of the first modes is coalesced separately, keeping the rank.
    Symbolic entries are merged only when the equality is provable, which keeps the result exact.
    """
    layout = _materialize(layout, "coalesce")
    if is_tuple(profile):
        return _per_mode("coalesce", coalesce, layout, profile)
    shapes: list = [1]
    strides: list = [0]
    for s, d in zip(flatten(layout.shape), flatten(layout.stride), strict=True):
        if is_value(s, 1):
            continue
        if is_value(shapes[-1], 1):
            shapes[-1], strides[-1] = s, d
        elif (
            shapes[-1] is not None
            and strides[-1] is not None
            and same_value(shapes[-1] * strides[-1], d)
        ):
            shapes[-1] = shapes[-1] * s if s is not None else None
        else:
            shapes.append(s)
            strides.append(d)
    return _from_modes(shapes, strides)


def filter(layout: Layout, profile: IntTuple = None) -> Layout:
    """`coalesce` after also dropping stride-0 (broadcast) modes: the layout's distinct image."""
    layout = _materialize(layout, "filter")
    if is_tuple(profile):
        return _per_mode("filter", filter, layout, profile)
    kept = [
        (s, d)
        for s, d in zip(flatten(layout.shape), flatten(layout.stride), strict=True)
        if not (is_value(s, 1) or is_value(d, 0))
    ]
    if not kept:
        return Layout(1, 0)
    return coalesce(Layout(tuple(s for s, _ in kept), tuple(d for _, d in kept)))


def composition(a: Layout, b: Any) -> Layout:
    """`R = a o b` with `R(i) == a(b(i))` for every `i < size(b)`, shaped like `b`.

    `b` may be a Layout, an extent `n` (meaning `n:1`), None (no-op), or a tuple tiler applied to
    `a`'s modes one by one. Each step of `b`'s stride through `a`'s coalesced modes must divide or
    be divided by the mode's extent, and `b`'s extent must split evenly; otherwise the result would
    not be a layout and the function refuses (pycute would silently truncate).
    """
    fn = "composition"
    a = _materialize(a, fn)
    if b is None:
        return a
    if is_tuple(b):
        return _per_mode(fn, composition, a, b)
    b = _tiler(b, fn)
    if is_tuple(b.shape):
        result = make_layout(composition(a, mode) for mode in b.modes())
    elif is_value(b.stride, 0):
        return Layout(b.shape, 0)
    elif is_value(b.shape, 1) and is_int(b.stride) and b.stride < 0:
        # one coordinate, so any stride is a valid answer: the one the mirrored positive
        # stride gives, negated (`composition(4:16, 1:-32)` is `1:-512`)
        mirrored = _compose_mode(_static(coalesce(a), fn), Layout(1, -b.stride))
        return Layout(1, -mirrored.stride)
    else:
        result = _compose_mode(_static(coalesce(a), fn), _static(b, fn))
    if _is_static_layout(a) and _is_static_layout(b):
        _check_composed(a, b, result)
    return result


POSTCONDITION_CHECKED = 4096
"""Coordinates of `b` at which `composition` checks its postcondition: all of a smaller `b`,
the first and the last this many of a larger one."""


def _check_composed(a: Layout, b: Layout, result: Layout) -> None:
    """Refuse a result that breaks the defining postcondition R(c) == a(b(c)) (for every `c`
    whose b(c) lies in a's domain): the divisibility checks above
    are necessary, not sufficient (`(6,2):(2,1) o (2,3):(3,2)` passes them and gives
    `(2,3):(6,4)`, whose R(5) = 14 while a(b(5)) = 3; pycute returns the same wrong layout)."""
    size = product(b.shape)
    if size <= 2 * POSTCONDITION_CHECKED:
        coords = range(size)
    else:
        coords = [*range(POSTCONDITION_CHECKED), *range(size - POSTCONDITION_CHECKED, size)]
    domain = a.size()
    for c in coords:
        if b(c) >= domain:
            continue  # beyond its domain `a` is only extended by its last mode
        got, want = result(c), a(b(c))
        if got != want:
            raise VerifyError(
                f"composition: {a} o {b} is not a layout: the candidate {result} gives "
                f"R({c}) = {got}, but a(b({c})) = {want}; the composition is refused"
            )


def _is_static_layout(layout: Layout) -> bool:
    return all(is_int(v) for v in (*flatten(layout.shape), *flatten(layout.effective_stride)))


def _compose_mode(a: Layout, b: Layout) -> Layout:
    """Composition of a coalesced static `a` with a single static mode `b = s:d` (d > 0)."""
    fn = "composition"
    if b.stride < 0:
        raise VerifyError(f"composition: the stride of {b} must not be negative")
    shapes, strides = flatten(a.shape), flatten(a.stride)
    rest_shape, rest_stride = b.shape, b.stride
    out_shapes: list = []
    out_strides: list = []
    for s, d in zip(shapes[:-1], strides[:-1], strict=True):
        if s % rest_stride != 0 and rest_stride % s != 0:
            raise VerifyError(
                f"{fn}: stride {rest_stride} of {b} and extent {s} of {a} do not divide one "
                "another (the composition is not a layout)"
            )
        step = min(max(1, s // rest_stride), rest_shape)
        if rest_shape % step != 0:
            raise VerifyError(
                f"{fn}: extent {rest_shape} of {b} does not split evenly over extent {s} of {a}"
            )
        if step != 1:
            out_shapes.append(step)
            out_strides.append(rest_stride * d)
        rest_shape //= step
        rest_stride = -(-rest_stride // s)
    if rest_shape != 1 or not out_shapes:
        out_shapes.append(rest_shape)
        out_strides.append(rest_stride * strides[-1])
    return _from_modes(out_shapes, out_strides)


def complement(layout: Any, max_idx: Any = 1) -> Layout:
    """The layout of the indices `layout` skips, up to `max_idx`: `(layout, complement)` is
    injective and the two images meet only at 0.

    Needs a layout whose modes, sorted by stride, do not interleave (each stride at least the span
    of the smaller ones); pycute returns a zero-extent mode there, this refuses.
    """
    fn = "complement"
    layout = _static(_tiler(layout, fn), fn)
    max_idx = require_int(max_idx, fn, "max_idx")
    current = 1
    out_shapes: list = []
    out_strides: list = []
    for d, s in sorted(zip(flatten(layout.stride), flatten(layout.shape), strict=True)):
        if d == 0 or s == 1:
            continue
        if d < current:
            raise VerifyError(
                f"{fn}: {layout} has a mode of stride {d} inside the span {current} of its "
                "smaller-stride modes (negative, overlapping or interleaved strides)"
            )
        out_shapes.append(d // current)
        out_strides.append(current)
        current = s * d
    out_shapes.append(-(-max_idx // current))
    out_strides.append(current)
    return coalesce(Layout(tuple(out_shapes), tuple(out_strides)))


def right_inverse(layout: Any) -> Layout | None:
    """The largest compact `R` with `layout(R(i)) == i` for `i < size(R)` (pycute's rule)."""
    fn = "right_inverse"
    if layout is None:
        return None
    layout = _static(_tiler(layout, fn), fn)
    shapes, strides = flatten(layout.shape), flatten(layout.stride)
    current = 1
    out_shapes: list = []
    out_strides: list = []
    for d, s, r in sorted(zip(strides, shapes, prefix_product(shapes), strict=True)):
        if s == 1:
            continue
        if d != current:
            break
        out_shapes.append(s)
        out_strides.append(r)
        current = s * d
    return coalesce(Layout(tuple(out_shapes), tuple(out_strides)))


def left_inverse(layout: Any) -> Layout | None:
    """`L` with `L(layout(i)) == i` for every `i < size(layout)` (layout injective)."""
    if layout is None:
        return None
    layout = _tiler(layout, "left_inverse")
    return right_inverse(make_layout(layout, complement(layout)))


def logical_divide(a: Layout, b: Any) -> Layout:
    """Split `a` into (tile, rest): `a o (b, complement(b, size(a)))`; tuple tilers per mode."""
    fn = "logical_divide"
    a = _materialize(a, fn)
    if b is None:
        return a
    if is_tuple(b):
        return _per_mode(fn, logical_divide, a, b)
    b = _tiler(b, fn)
    size = require_int(a.size(), fn, "size")
    return composition(a, make_layout(b, complement(b, size)))


def logical_product(a: Layout, b: Any) -> Layout:
    """Repeat `a` as laid out by `b`: `(a, complement(a, size(a) * cosize(b)) o b)`.

    An extent tiler `n` means `n:1` (pycute's int branch calls logical_divide; that is its bug,
    not a semantics).
    """
    fn = "logical_product"
    a = _materialize(a, fn)
    if b is None:
        return a
    if is_tuple(b):
        return _per_mode(fn, logical_product, a, b)
    b = _tiler(b, fn)
    bound = require_int(a.size(), fn, "size") * require_int(b.cosize(), fn, "cosize")
    return make_layout(a, composition(complement(a, bound), b))


def _hier_unzip(splitter, fn: str, a: Layout, b: Any) -> Layout:
    """Apply `splitter` per tiler mode; gather the results as ((tiles...), (rests..., others))."""
    a = _materialize(a, fn)
    if b is None:
        return make_layout(Layout(1, 0), a)
    if not is_tuple(b):
        return splitter(a, b)
    if a.rank < len(b):
        raise VerifyError(f"{fn}: the tiler {b!r} has more modes than the rank {a.rank} of {a}")
    modes = a.modes()
    split = [_hier_unzip(splitter, fn, modes[i], t) for i, t in enumerate(b)]
    return make_layout(
        make_layout(part[0] for part in split),
        make_layout([part[1] for part in split] + list(modes[len(b) :])),
    )


def zipped_divide(a: Layout, b: Any) -> Layout:
    """`logical_divide` with the tile modes gathered first: ((tiles...), (rests...))."""
    return _hier_unzip(logical_divide, "zipped_divide", a, b)


def tiled_divide(a: Layout, b: Any) -> Layout:
    """`zipped_divide` with the rest modes unpacked: ((tiles...), rest0, rest1, ...)."""
    zipped = zipped_divide(a, b)
    return make_layout([zipped[0], *zipped[1].modes()])


def zipped_product(a: Layout, b: Any) -> Layout:
    """`logical_product` with the tile modes gathered first."""
    return _hier_unzip(logical_product, "zipped_product", a, b)


def tiled_product(a: Layout, b: Any) -> Layout:
    """`zipped_product` with the rest modes unpacked."""
    zipped = zipped_product(a, b)
    return make_layout([zipped[0], *zipped[1].modes()])
