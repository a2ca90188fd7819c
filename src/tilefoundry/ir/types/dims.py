"""Shape dimensions: `ShapeDim = int | DimVar | DimExpr`, always kept in one affine normal form.

spec-facts types §4: every dim stored in a type or attribute goes through one normaliser, so
`(S+1)-1` *is* `S`, `S-S` is the int `0` and `S+1 == 1+S`. Two dims are equal exactly when their
normal forms are structurally equal, which is what makes shape comparison in typeinfer a plain
`==`. The normal form is

    const + c1*a1 + c2*a2 + ...        (a `DimAffine`, or just an int / a single atom)

where each atom `ai` is a `DimVar` or a non-affine `DimAtom` (a product of two symbolic dims,
floordiv/mod by a constant or a symbol, min, max) whose operands are themselves normal. Atoms are
ordered by a deterministic key, so printing and hashing never depend on construction order.
Envelope bounds are never used to simplify (spec-facts types §4): `S//S` stays as written, but a
rewrite that holds for every integer is applied (`(4*S+5)//4 == S+1+1//4`, i.e. `S+1`).
"""

from __future__ import annotations

import numbers
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from tilefoundry.errors import VerifyError
from tilefoundry.ir.names import check_name


class _DimArith:
    """The `+ - * // %` operators (and reflected forms) shared by DimVar and DimExpr.

    spec-facts types §4: a bool operand raises rather than acting as 0/1; any non-dim operand is a
    VerifyError so that a bare TypeError never reaches the user.
    """

    __slots__ = ()

    def __add__(self, other: Any) -> ShapeDim:
        return dim_add(self, other)

    def __radd__(self, other: Any) -> ShapeDim:
        return dim_add(other, self)

    def __sub__(self, other: Any) -> ShapeDim:
        return dim_sub(self, other)

    def __rsub__(self, other: Any) -> ShapeDim:
        return dim_sub(other, self)

    def __mul__(self, other: Any) -> ShapeDim:
        return dim_mul(self, other)

    def __rmul__(self, other: Any) -> ShapeDim:
        return dim_mul(other, self)

    def __floordiv__(self, other: Any) -> ShapeDim:
        return dim_floordiv(self, other)

    def __rfloordiv__(self, other: Any) -> ShapeDim:
        return dim_floordiv(other, self)

    def __mod__(self, other: Any) -> ShapeDim:
        return dim_mod(self, other)

    def __rmod__(self, other: Any) -> ShapeDim:
        return dim_mod(other, self)

    def __neg__(self) -> ShapeDim:
        return dim_sub(0, self)

    # A symbolic dim has no static order; comparing one is a user error, not a Python TypeError.
    def _no_order(self, other: Any) -> bool:
        raise VerifyError(
            f"ShapeDim: {self} has no static ordering; use dim_upper_bound() or resolve_dim()"
        )

    __lt__ = __le__ = __gt__ = __ge__ = _no_order


class DimVar(_DimArith):
    """A named symbolic extent with the half-open envelope `[lo, hi)`.

    Interned per `(name, lo, hi)` (spec-facts types §4) so identity is equality and signature
    checks can compare by `is`. `[k, k+1)` is the fixed value k. Copy and pickle keep identity.
    The table holds its DimVars weakly (one nothing refers to any more is dropped, and is built
    afresh if named again: nothing can tell the two apart) and is read and filled under a lock,
    so two threads naming the same DimVar get the same object.
    """

    __slots__ = ("__weakref__", "hi", "lo", "name")
    _interned: ClassVar[weakref.WeakValueDictionary[tuple[str, int, int], DimVar]] = (
        weakref.WeakValueDictionary()
    )
    _interning: ClassVar[threading.Lock] = threading.Lock()

    name: str
    lo: int
    hi: int

    def __new__(cls, name: str, lo: int, hi: int) -> DimVar:
        check_name("DimVar", name)
        for label, bound in (("lo", lo), ("hi", hi)):
            if not _is_int(bound):
                raise VerifyError(f"DimVar {name}: {label} must be an int, got {bound!r}")
        lo, hi = int(lo), int(hi)
        if not lo < hi:
            raise VerifyError(
                f"DimVar {name}: envelope [lo, hi) must be non-empty (lo < hi), got [{lo}, {hi})"
            )
        key = (name, lo, hi)
        with cls._interning:
            existing = cls._interned.get(key)
            if existing is not None:
                return existing
            self = super().__new__(cls)
            object.__setattr__(self, "name", name)
            object.__setattr__(self, "lo", lo)
            object.__setattr__(self, "hi", hi)
            cls._interned[key] = self
            return self

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"DimVar {self.name} is immutable")

    def __copy__(self) -> DimVar:
        return self

    def __deepcopy__(self, memo: dict) -> DimVar:
        return self

    def __reduce__(self) -> tuple:
        return (DimVar, (self.name, self.lo, self.hi))

    def __repr__(self) -> str:
        return f"DimVar({self.name!r}, {self.lo}, {self.hi})"

    def __str__(self) -> str:
        return self.name

    # Identity equality (interned); defined explicitly because _DimArith defines ordering.
    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


class DimExpr(_DimArith):
    """A symbolic dim that is not a single DimVar: a `DimAffine` sum or a non-affine `DimAtom`.

    Never construct one directly: build dims with the operators and helpers in this module, which
    return the normal form (possibly an int or a DimVar).
    """

    __slots__ = ()


class DimOpKind(Enum):
    """The non-affine operations an atom can apply (sum and const-scaling are affine)."""

    MUL = "*"
    FLOORDIV = "//"
    MOD = "%"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True, slots=True, repr=False, order=False)
class DimAtom(DimExpr):
    """A non-affine node `lhs <kind> rhs` over normal-form operands (MUL/MIN/MAX are sorted)."""

    kind: DimOpKind
    lhs: ShapeDim
    rhs: ShapeDim

    def __repr__(self) -> str:
        return f"DimExpr({self})"

    def __str__(self) -> str:
        return _format(self)


@dataclass(frozen=True, slots=True, repr=False, order=False)
class DimAffine(DimExpr):
    """`const + sum(coeff * atom)`: at least one term, nonzero coefficients, terms key-sorted."""

    const: int
    terms: tuple[tuple[DimVar | DimAtom, int], ...]

    def __repr__(self) -> str:
        return f"DimExpr({self})"

    def __str__(self) -> str:
        return _format(self)


# `isinstance(True, ShapeDim)` holds (bool is an int); use is_shape_dim() to validate.
ShapeDim = int | DimVar | DimExpr
Atom = DimVar | DimAtom
Linear = tuple[int, dict[Atom, int]]


def _is_int(x: object) -> bool:
    """A non-bool integer (numpy integers included; numpy bools are not Integral). A plain int,
    by far the common case, skips the ABC check."""
    if type(x) is int:
        return True
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_shape_dim(x: object) -> bool:
    """spec-facts types §4: int (not bool) / DimVar / dim expression."""
    return _is_int(x) or isinstance(x, DimVar | DimExpr)


def normalize_dim(x: object, *, what: str = "ShapeDim") -> ShapeDim:
    """Check `x` is a ShapeDim and return it in normal form (numpy ints become Python ints)."""
    if type(x) is int:
        return x
    if isinstance(x, bool):
        raise VerifyError(f"{what}: a bool is not a dimension (got {x!r}); use an int")
    if _is_int(x):
        return int(x)
    if isinstance(x, DimVar | DimExpr):
        return x
    raise VerifyError(f"{what}: expected an int, DimVar or dim expression, got {x!r}")


def is_static(dim: ShapeDim) -> bool:
    """True when the (normalised) dim is a plain int."""
    return _is_int(normalize_dim(dim))


# ---- the normal form ---------------------------------------------------------------------------


def _sort_key(d: ShapeDim) -> tuple:
    """A total, construction-order-independent order over normal-form dims."""
    if isinstance(d, int):
        return (4, d)
    if isinstance(d, DimVar):
        return (1, d.name, d.lo, d.hi)
    if isinstance(d, DimAtom):
        return (2, d.kind.value, _sort_key(d.lhs), _sort_key(d.rhs))
    assert isinstance(d, DimAffine)
    return (3, tuple((_sort_key(a), c) for a, c in d.terms), d.const)


def _linear(d: ShapeDim) -> Linear:
    if isinstance(d, int):
        return d, {}
    if isinstance(d, DimAffine):
        return d.const, dict(d.terms)
    return 0, {d: 1}


def _from_linear(const: int, terms: Mapping[Atom, int]) -> ShapeDim:
    kept = sorted(((a, c) for a, c in terms.items() if c != 0), key=lambda t: _sort_key(t[0]))
    if not kept:
        return const
    if const == 0 and len(kept) == 1 and kept[0][1] == 1:
        return kept[0][0]
    return DimAffine(const, tuple(kept))


def _combine(a: ShapeDim, b: ShapeDim, sign: int) -> ShapeDim:
    ca, ta = _linear(a)
    cb, tb = _linear(b)
    for atom, coeff in tb.items():
        ta[atom] = ta.get(atom, 0) + sign * coeff
    return _from_linear(ca + sign * cb, ta)


def _scale(d: ShapeDim, k: int) -> ShapeDim:
    const, terms = _linear(d)
    return _from_linear(const * k, {a: c * k for a, c in terms.items()})


def _operands(op: str, a: Any, b: Any) -> tuple[ShapeDim, ShapeDim]:
    what = f"ShapeDim {op}"
    return normalize_dim(a, what=what), normalize_dim(b, what=what)


def dim_add(a: Any, b: Any) -> ShapeDim:
    a, b = _operands("+", a, b)
    return _combine(a, b, 1)


def dim_sub(a: Any, b: Any) -> ShapeDim:
    a, b = _operands("-", a, b)
    return _combine(a, b, -1)


def dim_mul(a: Any, b: Any) -> ShapeDim:
    """A constant factor distributes over the sum; two symbolic factors form a product atom."""
    a, b = _operands("*", a, b)
    if isinstance(a, int):
        return _scale(b, a)
    if isinstance(b, int):
        return _scale(a, b)
    lhs, rhs = sorted((a, b), key=_sort_key)
    return DimAtom(DimOpKind.MUL, lhs, rhs)


def _split_by_divisor(a: ShapeDim, b: int) -> tuple[ShapeDim, ShapeDim]:
    """Write `a == b*q + r` for a positive constant `b`, with q affine.

    Any such split gives `a // b == q + r // b` and `a % b == r % b` for every integer value of the
    atoms. To make the split unique the constant goes to [0, b) (floor) and each coefficient
    towards zero (so `-S // 4` stays as written instead of becoming `-S + (3*S)//4`).
    """
    const, terms = _linear(a)
    q_const, r_const = divmod(const, b)
    q_terms: dict[Atom, int] = {}
    r_terms: dict[Atom, int] = {}
    for atom, coeff in terms.items():
        quotient = coeff // b if coeff >= 0 else -(-coeff // b)
        q_terms[atom], r_terms[atom] = quotient, coeff - quotient * b
    return _from_linear(q_const, q_terms), _from_linear(r_const, r_terms)


def dim_floordiv(a: Any, b: Any) -> ShapeDim:
    """Python floor division; a constant divisor pulls out the exactly divisible part."""
    a, b = _operands("//", a, b)
    if b == 0:
        raise VerifyError(f"ShapeDim //: division of {a} by zero")
    if not isinstance(b, int):
        return DimAtom(DimOpKind.FLOORDIV, a, b)
    if isinstance(a, int):
        return a // b
    if b < 0:  # floor(a / b) == floor(-a / -b): one spelling, with a positive divisor
        return dim_floordiv(_scale(a, -1), -b)
    quotient, remainder = _split_by_divisor(a, b)
    if isinstance(remainder, int):
        return dim_add(quotient, remainder // b)
    return dim_add(quotient, DimAtom(DimOpKind.FLOORDIV, remainder, b))


def dim_mod(a: Any, b: Any) -> ShapeDim:
    """Python modulo; by a constant only the remainder part survives (`(4*S+5) % 4 == 1`)."""
    a, b = _operands("%", a, b)
    if b == 0:
        raise VerifyError(f"ShapeDim %: modulo of {a} by zero")
    if not isinstance(b, int):
        return DimAtom(DimOpKind.MOD, a, b)
    if isinstance(a, int):
        return a % b
    if b < 0:  # a % b == -((-a) % -b): one spelling, with a positive divisor
        return _scale(dim_mod(_scale(a, -1), -b), -1)
    _, remainder = _split_by_divisor(a, b)
    if isinstance(remainder, int):
        return remainder % b
    return DimAtom(DimOpKind.MOD, remainder, b)


def _min_max(kind: DimOpKind, a: Any, b: Any) -> ShapeDim:
    a, b = _operands(kind.value, a, b)
    pick = min if kind is DimOpKind.MIN else max
    difference = dim_sub(a, b)
    if isinstance(difference, int):  # includes both-constant and a == b
        return a if pick(difference, 0) == difference else b
    lhs, rhs = sorted((a, b), key=_sort_key)
    return DimAtom(kind, lhs, rhs)


def dim_min(a: Any, b: Any) -> ShapeDim:
    """min(a, b); folded when the operands differ by a constant (e.g. both static)."""
    return _min_max(DimOpKind.MIN, a, b)


def dim_max(a: Any, b: Any) -> ShapeDim:
    """max(a, b); folded when the operands differ by a constant (e.g. both static)."""
    return _min_max(DimOpKind.MAX, a, b)


def ceildiv(a: Any, b: Any) -> ShapeDim:
    """spec-facts types §4: `ceildiv(a, b) = (a + b - 1) // b`, built from the existing ops."""
    return dim_floordiv(dim_sub(dim_add(a, b), 1), b)


# ---- queries ------------------------------------------------------------------------------------


def dim_vars(dim: ShapeDim) -> tuple[DimVar, ...]:
    """The DimVars `dim` mentions, each once, sorted by (name, lo, hi) for stable messages."""
    found: set[DimVar] = set()

    def walk(d: ShapeDim) -> None:
        if isinstance(d, DimVar):
            found.add(d)
        elif isinstance(d, DimAtom):
            walk(d.lhs)
            walk(d.rhs)
        elif isinstance(d, DimAffine):
            for atom, _ in d.terms:
                walk(atom)

    walk(normalize_dim(dim))
    return tuple(sorted(found, key=_sort_key))


def resolve_dim(dim: ShapeDim, bindings: Mapping[str | DimVar, int]) -> int:
    """Evaluate `dim` with each DimVar bound by object or by name (the object wins).

    Pure arithmetic: envelope membership of a binding is the binder's check (dispatch/evaluator),
    because the normal form never applies envelopes either.
    """

    if not isinstance(bindings, Mapping):
        raise VerifyError(f"resolve_dim: bindings must be a mapping, got {bindings!r}")

    def lookup(var: DimVar) -> int:
        value = bindings[var] if var in bindings else bindings.get(var.name)
        if value is None:
            raise VerifyError(f"resolve_dim: DimVar {var.name} is unbound in {dim}")
        if not _is_int(value):
            raise VerifyError(f"resolve_dim: DimVar {var.name} is bound to non-int {value!r}")
        return int(value)

    def ev(d: ShapeDim) -> int:
        if isinstance(d, int):
            return d
        if isinstance(d, DimVar):
            return lookup(d)
        if isinstance(d, DimAffine):
            return d.const + sum(c * ev(a) for a, c in d.terms)
        lhs, rhs = ev(d.lhs), ev(d.rhs)
        if d.kind in (DimOpKind.FLOORDIV, DimOpKind.MOD) and rhs == 0:
            raise VerifyError(f"resolve_dim: {d} divides by zero under the given bindings")
        return _APPLY[d.kind](lhs, rhs)

    return ev(normalize_dim(dim))


_APPLY = {
    DimOpKind.MUL: lambda x, y: x * y,
    DimOpKind.FLOORDIV: lambda x, y: x // y,
    DimOpKind.MOD: lambda x, y: x % y,
    DimOpKind.MIN: min,
    DimOpKind.MAX: max,
}

Bound = int | None
Interval = tuple[Bound, Bound]  # inclusive (lo, hi); None is "not statically known"


def _add_bounds(x: Bound, y: Bound) -> Bound:
    return None if x is None or y is None else x + y


def _interval(d: ShapeDim) -> Interval:
    """Inclusive static bounds, composed only where hir TopK's bound rule says they compose."""
    if isinstance(d, int):
        return d, d
    if isinstance(d, DimVar):
        return d.lo, d.hi - 1
    if isinstance(d, DimAffine):
        # hir TopK: a bound does not compose "through DimSub"; in the normal form a subtraction
        # shows up as a negative coefficient or constant, so those fail open.
        if d.const < 0 or any(c < 0 for _, c in d.terms):
            return None, None
        lo: Bound = d.const
        hi: Bound = d.const
        for atom, coeff in d.terms:
            alo, ahi = _interval(atom)
            lo = _add_bounds(lo, None if alo is None else coeff * alo)
            hi = _add_bounds(hi, None if ahi is None else coeff * ahi)
        return lo, hi
    (llo, lhi), (rlo, rhi) = _interval(d.lhs), _interval(d.rhs)
    if d.kind is DimOpKind.MIN:
        lo = None if llo is None or rlo is None else min(llo, rlo)
        hi = lhi if rhi is None else rhi if lhi is None else min(lhi, rhi)
        return lo, hi
    if d.kind is DimOpKind.MAX:
        lo = llo if rlo is None else rlo if llo is None else max(llo, rlo)
        hi = None if lhi is None or rhi is None else max(lhi, rhi)
        return lo, hi
    if d.kind is DimOpKind.MUL:
        # Monotone only over non-negative factors.
        if llo is None or rlo is None or llo < 0 or rlo < 0:
            return None, None
        return llo * rlo, None if lhi is None or rhi is None else lhi * rhi
    # FLOORDIV / MOD: only a positive constant divisor composes (hir TopK).
    if not isinstance(d.rhs, int) or d.rhs <= 0:
        return None, None
    divisor = d.rhs
    if d.kind is DimOpKind.FLOORDIV:
        return (
            None if llo is None else llo // divisor,
            None if lhi is None else lhi // divisor,
        )
    if llo is None or llo < 0:
        return 0, divisor - 1
    if lhi is not None and lhi < divisor:
        return llo, lhi
    return 0, divisor - 1


def dim_upper_bound(dim: ShapeDim) -> int | None:
    """The largest value `dim` can take, INCLUSIVE (a DimVar's is `hi - 1`), or None.

    hir TopK: composed through add, multiplication by a positive constant or of non-negative
    factors, floordiv/mod by a positive constant, min and max; None where it does not compose
    statically (through a subtraction / negative term, or a symbolic divisor). `min` needs only
    one bounded side, so `dim_min(512, CTX // 4)` is bounded by 512 whatever CTX is.
    """
    return _interval(normalize_dim(dim))[1]


def dim_lower_bound(dim: ShapeDim) -> int | None:
    """The smallest value `dim` can take (a DimVar's is `lo`), composed like `dim_upper_bound`;
    None where it does not compose. It proves a window fits a symbolic axis (DESIGN §4.14)."""
    return _interval(normalize_dim(dim))[0]


# ---- printing -----------------------------------------------------------------------------------

# Precedence levels for parenthesisation: sums < products/divisions < atoms.
_SUM, _PRODUCT, _PRIMARY = 1, 2, 3


def _prec(d: ShapeDim) -> int:
    if isinstance(d, int):
        return _PRIMARY if d >= 0 else _SUM
    if isinstance(d, DimAffine):
        return _SUM
    if isinstance(d, DimAtom) and d.kind in (DimOpKind.MUL, DimOpKind.FLOORDIV, DimOpKind.MOD):
        return _PRODUCT
    return _PRIMARY


def _wrap(d: ShapeDim, minimum: int) -> str:
    text = _format(d)
    return f"({text})" if _prec(d) < minimum else text


def _format_term(atom: Atom, coeff: int) -> str:
    magnitude = abs(coeff)
    if magnitude == 1:
        return _format(atom)
    # `2*S*T` reads as intended; `2*(S//4)` needs the parentheses.
    is_product = isinstance(atom, DimAtom) and atom.kind is DimOpKind.MUL
    return f"{magnitude}*{_format(atom) if is_product else _wrap(atom, _PRIMARY)}"


def _format(d: ShapeDim) -> str:
    if isinstance(d, int | DimVar):
        return str(d)
    if isinstance(d, DimAffine):
        text = ""
        for atom, coeff in d.terms:
            body = _format_term(atom, coeff)
            text += ("-" if coeff < 0 else ("+" if text else "")) + body
        if d.const:
            text += f"{'-' if d.const < 0 else '+'}{abs(d.const)}"
        return text
    if d.kind in (DimOpKind.MIN, DimOpKind.MAX):
        return f"{d.kind.value}({_format(d.lhs)}, {_format(d.rhs)})"
    return f"{_wrap(d.lhs, _PRODUCT)}{d.kind.value}{_wrap(d.rhs, _PRIMARY)}"


def format_dim(dim: ShapeDim) -> str:
    """The deterministic, readable text of a dim: `S+1`, `2*S`, `(S+1)//4`, `min(S, 512)`."""
    return _format(normalize_dim(dim))
