"""IntTuple: the nested shape/stride primitive of the layout algebra (shard-layout §1).

Semantics follow pycute (the CuTe reference) so the algebra in `layout.py` agrees with it exactly.
An IntTuple is an entry or a (possibly nested) tuple of IntTuples. An entry is one of:

- a non-bool `int` (bool is refused everywhere: `True` as an extent is always a bug);
- a symbolic dim (a DimVar or dim expression). This module never imports those classes: any entry
  that is not an int, a tuple or None is treated as symbolic and computed with the Python operators
  `*`, `+`, `//`, `%` that the dim classes overload. A decision that needs a concrete value
  (divisibility, a comparison) is only taken when the dim arithmetic folds to a plain int; otherwise
  the function refuses with a `VerifyError` rather than guess;
- `None`, a launch-provided extent. Products involving None are None (the extent is unknown, not
  wrong); anything that needs a concrete integer refuses with a `VerifyError` naming the function.
"""

from __future__ import annotations

from typing import Any

from tilefoundry.errors import VerifyError

IntTuple = Any
"""`int | ShapeDim | None | tuple[IntTuple, ...]`; kept as `Any` because the dim classes live in a
module this one must not import."""

_NOT_ENTRIES = (bool, float, complex, str, bytes, list, dict, set, frozenset)


def is_int(x: Any) -> bool:
    """A concrete integer entry; `bool` is not one (it is an int subclass in Python only)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x: Any) -> bool:
    return isinstance(x, tuple)


def is_symbolic(x: Any) -> bool:
    """An entry that is neither a concrete int, a tuple nor a launch-provided None."""
    return not (is_int(x) or is_tuple(x) or x is None or isinstance(x, _NOT_ENTRIES))


def has_none(t: IntTuple) -> bool:
    """Whether any entry is a launch-provided (None) extent."""
    if is_tuple(t):
        return any(has_none(v) for v in t)
    return t is None


def is_static(t: IntTuple) -> bool:
    """Whether every entry is a concrete int (no symbolic dim, no None)."""
    if is_tuple(t):
        return all(is_static(v) for v in t)
    return is_int(t)


def check_int_tuple(t: IntTuple, what: str) -> IntTuple:
    """Return `t` if it is a well-formed IntTuple, else raise naming `what` (e.g. "Layout: shape").

    Lists are refused rather than converted: IntTuples are hashed and compared by value, and a list
    silently turned into a tuple would hide a caller that mutates it afterwards.
    """
    if is_tuple(t):
        for v in t:
            check_int_tuple(v, what)
        return t
    if isinstance(t, _NOT_ENTRIES):
        raise VerifyError(
            f"{what}: {t!r} ({type(t).__name__}) is not an IntTuple entry "
            "(entries are int, a symbolic dim, None, or a tuple of those)"
        )
    return t


def rank(t: IntTuple) -> int:
    """Number of top-level modes: `len` of a tuple, 1 for an entry."""
    return len(t) if is_tuple(t) else 1


def flatten(t: IntTuple) -> tuple:
    """The unique flat view: every entry in left-to-right order."""
    if is_tuple(t):
        return tuple(e for v in t for e in flatten(v))
    return (t,)


def unflatten(flat: tuple, profile: IntTuple) -> IntTuple:
    """Re-nest `flat` into the tree structure of `profile` (inverse of `flatten`)."""
    if len(flat) != len(flatten(profile)):
        raise VerifyError(
            f"unflatten: {len(flat)} entries do not fit profile {profile!r} "
            f"({len(flatten(profile))} leaves)"
        )
    return _unflatten(iter(flat), profile)


def _unflatten(it, profile):
    if is_tuple(profile):
        return tuple(_unflatten(it, p) for p in profile)
    return next(it)


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same tree structure (profile), entries ignored: the shape/stride pairing rule."""
    if is_tuple(a) and is_tuple(b):
        return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b, strict=True))
    return not is_tuple(a) and not is_tuple(b)


def weakly_congruent(a: IntTuple, b: IntTuple) -> bool:
    """`a`'s tree is a coarsening of `b`'s: an entry of `a` may stand for a whole subtree of `b`."""
    if not is_tuple(a):
        return True
    return (
        is_tuple(b)
        and len(a) == len(b)
        and all(weakly_congruent(x, y) for x, y in zip(a, b, strict=True))
    )


def compatible(a: IntTuple, b: IntTuple) -> bool:
    """Every coordinate of shape `a` is also a coordinate of shape `b` (same sizes, `a` coarser).

    Sizes are compared exactly: a symbolic size only matches one it is provably equal to.
    """
    if is_tuple(a):
        if not is_tuple(b) or len(a) != len(b):
            return False
        return all(compatible(x, y) for x, y in zip(a, b, strict=True))
    return same_value(a, product(b))


def same_value(a: Any, b: Any) -> bool:
    """Provable equality of two entries; unknown (None, or an undecided symbolic `==`) is False.

    Used for merge decisions (coalesce) where "not provably equal" keeps the safe, unmerged form.
    """
    if a is None or b is None:
        return False
    if is_int(a) and is_int(b):
        return a == b
    if a is b:
        return True
    result = a == b
    return isinstance(result, bool) and result


def is_value(x: Any, n: int) -> bool:
    """`x` is the concrete int `n` (a symbolic dim never is, even if it may be bound to `n`)."""
    return is_int(x) and x == n


def require_int(x: Any, fn: str, what: str = "entry") -> int:
    """`x` as a concrete int, or a VerifyError naming `fn` and why it needs one."""
    if is_int(x):
        return x
    if x is None:
        raise VerifyError(
            f"{fn}: needs a concrete integer {what}, got None (a launch-provided extent)"
        )
    if is_tuple(x):
        raise VerifyError(f"{fn}: needs an integer {what}, got the tuple {x!r}")
    raise VerifyError(f"{fn}: needs a concrete integer {what}, got the symbolic {x!r}")


def _mul(a: Any, b: Any) -> Any:
    """Entry product; None (unknown extent) absorbs, int 1 is folded away to keep exprs small."""
    if type(a) is int and type(b) is int:  # the common static case, kept cheap
        return a * b
    if a is None or b is None:
        return None
    if is_value(a, 1):
        return b
    if is_value(b, 1):
        return a
    return a * b


def _add(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return a + b
    if a is None or b is None:
        return None
    if is_value(a, 0):
        return b
    if is_value(b, 0):
        return a
    return a + b


def _no_none(x: Any, fn: str, what: str) -> Any:
    if x is None:
        raise VerifyError(f"{fn}: needs a concrete {what}, got None (a launch-provided extent)")
    return x


def product(a: IntTuple) -> Any:
    """Product of all entries (1 for `()`); None when any entry is None."""
    if is_tuple(a):
        result: Any = 1
        for v in a:
            result = _mul(result, product(v))
        return result
    return a


def inner_product(a: IntTuple, b: IntTuple) -> Any:
    """Sum of entry-wise products of two congruent IntTuples (coordinate · stride)."""
    if is_tuple(a) != is_tuple(b) or (is_tuple(a) and len(a) != len(b)):
        raise VerifyError(f"inner_product: {a!r} and {b!r} are not congruent")
    if is_tuple(a):
        result: Any = 0
        for x, y in zip(a, b, strict=True):
            result = _add(result, inner_product(x, y))
        return result
    return _mul(a, b)


def elem_scale(a: IntTuple, b: IntTuple) -> IntTuple:
    """Scale `a` entry-wise by `b`; an entry of `a` facing a subtree of `b` takes its product."""
    if is_tuple(a):
        if not is_tuple(b) or len(a) != len(b):
            raise VerifyError(f"elem_scale: {a!r} cannot be scaled by {b!r} (not congruent)")
        return tuple(elem_scale(x, y) for x, y in zip(a, b, strict=True))
    return _mul(a, product(b))


def prefix_product(a: IntTuple, init: IntTuple = 1) -> IntTuple:
    """Exclusive prefix product in column-major (colexicographic) order, congruent with `a`.

    This is pycute's default stride, i.e. the compact column-major layout of shape `a`.
    """
    if is_tuple(a):
        if is_tuple(init):
            if len(a) != len(init):
                raise VerifyError(f"prefix_product: {a!r} and init {init!r} are not congruent")
            return tuple(prefix_product(x, i) for x, i in zip(a, init, strict=True))
        result = []
        for v in a:
            result.append(prefix_product(v, init))
            init = _mul(init, product(v))
        return tuple(result)
    if is_tuple(init):
        raise VerifyError(f"prefix_product: entry {a!r} cannot take the tuple init {init!r}")
    return init


def ceil_div(a: Any, b: Any) -> Any:
    """`ceil(a / b)` for concrete ints, `a // b` when `b` provably divides `a`."""
    fn = "ceil_div"
    a, b = _no_none(a, fn, "dividend"), _no_none(b, fn, "divisor")
    if is_int(a) and is_int(b):
        if b == 0:
            raise VerifyError(f"{fn}: division of {a} by zero")
        return -(-a // b)
    if is_value(b, 1):
        return a
    remainder = a % b
    if is_value(remainder, 0):
        return a // b
    raise VerifyError(f"{fn}: cannot decide ceil({a!r} / {b!r}) exactly for a symbolic operand")


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """Divide shape `a` by `b`, consuming `b` across `a`'s modes left to right (pycute rule).

    Each entry step requires one of the two to divide the other; the result of that step is
    `ceil(a / b)`. With a symbolic operand the step is taken only when the dim arithmetic proves the
    divisibility (its `%` folds to the int 0); otherwise the function refuses.
    """
    if is_tuple(a):
        if is_tuple(b):
            if len(a) != len(b):
                raise VerifyError(f"shape_div: {a!r} and {b!r} are not congruent")
            return tuple(shape_div(x, y) for x, y in zip(a, b, strict=True))
        result = []
        for v in a:
            result.append(shape_div(v, b))
            b = shape_div(b, product(v))
        return tuple(result)
    if is_tuple(b):
        return shape_div(a, product(b))
    return _entry_div(a, b)


def _entry_div(a: Any, b: Any) -> Any:
    fn = "shape_div"
    if is_value(b, 1):
        return a
    a, b = _no_none(a, fn, "extent"), _no_none(b, fn, "extent")
    if is_int(a) and is_int(b):
        if a == 0 or b == 0:
            if b == 0:
                raise VerifyError(f"{fn}: division of {a} by zero")
            return 0
        if a % b != 0 and b % a != 0:
            raise VerifyError(f"{fn}: neither of {a} and {b} divides the other")
        return -(-a // b)
    if same_value(a, b):
        return 1
    if is_value(a % b, 0):
        return a // b
    if is_value(b % a, 0):
        return 1
    raise VerifyError(
        f"{fn}: cannot prove that {a!r} and {b!r} divide one another (symbolic extents)"
    )


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple = None) -> Any:
    """Map a coordinate to an index: `sum(crd_i * stride_i)` (shard-layout §3).

    `crd` may be a full coordinate congruent with `shape`, or an int (a 1-D index into a mode) that
    is split colexicographically over that mode's sub-shape, as pycute does. `stride=None` is the
    column-major `prefix_product(shape)`.
    """
    return _crd2idx(crd, shape, prefix_product(shape) if stride is None else stride)


def _crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> Any:
    """`crd2idx` below the top level: a None stride entry here is a launch-provided stride."""
    fn = "crd2idx"
    if is_tuple(crd):
        if not is_tuple(shape) or not is_tuple(stride) or not len(crd) == len(shape) == len(stride):
            raise VerifyError(
                f"{fn}: coordinate {crd!r} is not congruent with shape {shape!r}, stride {stride!r}"
            )
        result: Any = 0
        for c, s, d in zip(crd, shape, stride, strict=True):
            result = _add(result, _crd2idx(c, s, d))
        return result
    if crd is None or isinstance(crd, _NOT_ENTRIES):
        raise VerifyError(f"{fn}: {crd!r} is not a coordinate")
    if is_tuple(shape):
        if not is_tuple(stride) or len(shape) != len(stride):
            raise VerifyError(f"{fn}: shape {shape!r} and stride {stride!r} are not congruent")
        if not shape:
            raise VerifyError(f"{fn}: the integer coordinate {crd!r} cannot index the shape ()")
        result = 0
        for s, d in zip(shape[:-1], stride[:-1], strict=True):
            extent = _no_none(product(s), fn, "extent to split a 1-D coordinate")
            result = _add(result, _crd2idx(crd % extent, s, d))
            crd = crd // extent
        return _add(result, _crd2idx(crd, shape[-1], stride[-1]))
    if is_tuple(stride):
        raise VerifyError(f"{fn}: shape {shape!r} and stride {stride!r} are not congruent")
    return _mul(crd, _no_none(stride, fn, "stride"))


def idx2crd(idx: IntTuple, shape: IntTuple, stride: IntTuple = None) -> IntTuple:
    """Inverse of `crd2idx` for compact strides: the coordinate `(idx // stride) % shape` per mode.

    `stride=None` is the column-major `prefix_product(shape)`, making this the colexicographic
    decomposition of a 1-D index.
    """
    return _idx2crd(idx, shape, prefix_product(shape) if stride is None else stride)


def _idx2crd(idx: IntTuple, shape: IntTuple, stride: IntTuple) -> IntTuple:
    fn = "idx2crd"
    if is_tuple(idx):
        if not is_tuple(shape) or not is_tuple(stride) or not len(idx) == len(shape) == len(stride):
            raise VerifyError(f"{fn}: index {idx!r} is not congruent with shape {shape!r}")
        return tuple(_idx2crd(i, s, d) for i, s, d in zip(idx, shape, stride, strict=True))
    if idx is None or isinstance(idx, _NOT_ENTRIES):
        raise VerifyError(f"{fn}: {idx!r} is not an index")
    if is_tuple(shape):
        if not is_tuple(stride) or len(shape) != len(stride):
            raise VerifyError(f"{fn}: shape {shape!r} and stride {stride!r} are not congruent")
        return tuple(_idx2crd(idx, s, d) for s, d in zip(shape, stride, strict=True))
    if is_tuple(stride):
        raise VerifyError(f"{fn}: shape {shape!r} and stride {stride!r} are not congruent")
    stride = _no_none(stride, fn, "stride")
    shape = _no_none(shape, fn, "extent")
    if is_value(stride, 0) or is_value(shape, 0):
        raise VerifyError(f"{fn}: cannot decompose an index over extent {shape} / stride {stride}")
    return (idx // stride) % shape


def crd2crd(crd: IntTuple, dst_shape: IntTuple, src_shape: IntTuple = None) -> IntTuple:
    """Re-express a coordinate of `src_shape` as one of `dst_shape` (through the 1-D index)."""
    fn = "crd2crd"
    if is_tuple(crd):
        if is_tuple(dst_shape):
            if len(crd) != len(dst_shape):
                raise VerifyError(f"{fn}: coordinate {crd!r} does not match shape {dst_shape!r}")
            return tuple(crd2crd(x, y) for x, y in zip(crd, dst_shape, strict=True))
        if src_shape is None:
            raise VerifyError(f"{fn}: flattening the coordinate {crd!r} needs its source shape")
        return crd2idx(crd, src_shape)
    if is_tuple(dst_shape):
        return idx2crd(crd, dst_shape)
    return crd
