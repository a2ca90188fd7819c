"""Shape dims: DimVar, the affine normal form, resolution and bounds (spec-facts types §4)."""

from __future__ import annotations

import copy
import gc
import operator
import pickle
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.threads import run_together
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import (
    DimExpr,
    DimVar,
    ceildiv,
    dim_max,
    dim_min,
    dim_upper_bound,
    dim_vars,
    format_dim,
    is_shape_dim,
    is_static,
    normalize_dim,
    resolve_dim,
)

S = DimVar("S", 1, 9)
T = DimVar("T", 0, 5)
U = DimVar("U", 2, 100)


# ---- DimVar -------------------------------------------------------------------------------------


def test_dimvar_is_interned_per_name_and_bounds():
    # spec-facts types §4: "DimVar identity is canonical per (name,lo,hi)".
    assert DimVar("S", 1, 9) is DimVar("S", 1, 9)
    assert DimVar("S", 1, 9) is not DimVar("S", 1, 10)
    assert DimVar("S", np.int64(1), 9) is DimVar("S", 1, 9)


def test_dimvar_identity_survives_copy_and_pickle():
    assert copy.copy(S) is S
    assert copy.deepcopy([S])[0] is S
    assert pickle.loads(pickle.dumps(S + 1)) == S + 1
    assert pickle.loads(pickle.dumps(S)) is S


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", 1, 9), "non-empty"),
        ((3, 1, 9), "non-empty"),
        (("S", 1.0, 9), "lo must be an int"),
        (("S", 1, "9"), "hi must be an int"),
        (("S", True, 9), "lo must be an int"),
        (("S", 9, 9), "lo < hi"),
        (("S", 9, 1), "lo < hi"),
    ],
)
def test_dimvar_rejects(args, message):
    # spec-facts types §4: non-empty name, int bounds, lo < hi.
    with pytest.raises(VerifyError, match=message):
        DimVar(*args)


def test_dimvar_fixed_value_envelope_is_allowed():
    # spec-facts types §4: `[k, k+1)` is the fixed value k.
    assert dim_upper_bound(DimVar("K", 7, 8)) == 7


def test_dimvar_is_immutable():
    with pytest.raises(AttributeError):
        S.hi = 3


def test_threads_naming_one_dimvar_get_one_object():
    """Issue 28: "DimVar interning is not thread-safe": eight threads name the same fresh
    DimVars together, with thread switches as frequent as CPython allows. (The old dict table
    happened to hold under CPython 3.11's GIL: nothing between its lookup and its insert could
    switch threads; the weak table's lookup is Python code, where threads switch, and without
    the lock this test finds DimVars made twice.)"""
    made: list[list[DimVar]] = [[] for _ in range(8)]

    def name_all(i: int) -> None:
        made[i].extend(DimVar(f"race{k}", 1, 8) for k in range(300))

    assert run_together(name_all, 8) == []
    for k in range(300):
        assert len({id(found[k]) for found in made}) == 1, f"race{k} was made twice"


def test_a_dropped_dimvar_is_not_kept_by_the_intern_table():
    """Issue 28: "its table keeps dropped DimVars"."""
    dropped = weakref.ref(DimVar("dropped", 1, 8))
    gc.collect()
    assert dropped() is None
    kept = DimVar("kept", 1, 8)
    gc.collect()
    assert DimVar("kept", 1, 8) is kept


# ---- the normal form ----------------------------------------------------------------------------

# spec-facts types §4: normal form: all-constant expressions become an int, `(S+1)-1 -> S`, one
# canonical form per value, so equality is structural on it. (built, expected)
NORMAL_FORM = [
    ((S + 1) - 1, S),
    (S - S, 0),
    (S + 0, S),
    (S * 1, S),
    (S * 0, 0),
    (0 * S, 0),
    (1 * S, S),
    (2 * S - S, S),
    (S + S, 2 * S),
    (S + 1, 1 + S),
    (S + T, T + S),
    (S * T, T * S),
    ((S + T) - T, S),
    ((S + 2) * 3, 3 * S + 6),
    (3 * (S - T), 3 * S - 3 * T),
    (-(S - 4), 4 - S),
    (dim_min(3, 4), 3),
    (dim_max(3, 4), 4),
    (dim_min(S, 512), dim_min(512, S)),
    (dim_max(S, T), dim_max(T, S)),
    (dim_min(S, S), S),
    (dim_min(S + 1, S + 3), S + 1),
    (dim_max(S + 1, S + 3), S + 3),
    (ceildiv(10, 4), 3),
    ((S + 1) // 1, S + 1),
    ((4 * S + 8) // 4, S + 2),
    ((4 * S + 5) // 4, S + 1),
    ((4 * S + 4 * T) // 2, 2 * S + 2 * T),
    ((4 * S + 5) % 4, 1),
    ((5 * S) % 5, 0),
    ((5 * S + 1) % 4, (S + 1) % 4),
    ((-5 * S) % 4, (-S) % 4),
    (S // -3, (-S) // 3),
    (S % -3, -((-S) % 3)),
    (17 // 5, 3),
    (17 % 5, 2),
    ((S * T) - (T * S), 0),
    ((S // T) - (S // T), 0),
]


@pytest.mark.parametrize(("built", "expected"), NORMAL_FORM)
def test_normal_form(built, expected):
    assert built == expected
    assert hash(built) == hash(expected)
    assert type(built) is type(expected)


def test_all_constant_results_are_plain_ints():
    for built in (S - S, (S + 3) - (S + 1), (2 * S) % 2, dim_min(S - S, 3)):
        assert type(built) is int


def test_cancelling_returns_the_dimvar_itself():
    assert (S + 1) - 1 is S
    assert 2 * S - S is S


@pytest.mark.parametrize(
    ("built", "text"),
    [
        (S + 1, "S+1"),
        (1 + S, "S+1"),
        (S - 1, "S-1"),
        (2 * S, "2*S"),
        (4 - S, "-S+4"),
        (S - 2 * T, "S-2*T"),
        ((S + 1) // 4, "(S+1)//4"),
        (S // 4, "S//4"),
        (S % 4, "S%4"),
        (dim_min(S, 512), "min(S, 512)"),
        (dim_max(512, S), "max(S, 512)"),
        (S * T, "S*T"),
        (2 * (S * T), "2*S*T"),
        (2 * (S // 4), "2*(S//4)"),
        (S // (T + 1), "S//(T+1)"),
        (S // -3, "(-S)//3"),
        (-S // 4, "(-S)//4"),
        ((S - 1) // 4, "(S+3)//4-1"),
        ((S * T) // 2, "S*T//2"),
        (S * (T // 2), "S*(T//2)"),
        (ceildiv(S, 4), "(S+3)//4"),
        (7, "7"),
    ],
)
def test_printing_is_deterministic_and_readable(built, text):
    assert format_dim(built) == text
    if not isinstance(built, int):
        assert str(built) == text


def test_repr_names_the_kind():
    assert repr(S) == "DimVar('S', 1, 9)"
    assert repr(S + 1) == "DimExpr(S+1)"


@pytest.mark.parametrize(
    "op",
    [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, dim_min, dim_max],
)
@pytest.mark.parametrize("bad", [True, False, 1.5, "2", None, (1,)])
def test_non_dim_operands_refused(op, bad):
    # spec-facts types §4: a bool operand raises rather than acting as 0/1.
    expected = r"ShapeDim \S+: (a bool is not a dimension|expected an int, DimVar or dim exp)"
    with pytest.raises(VerifyError, match=expected):
        op(S, bad)
    if op is operator.mod and isinstance(bad, str):
        return  # `"2" % S` is str formatting, decided by str before any dim code runs
    with pytest.raises(VerifyError, match=expected):
        op(bad, S)


@pytest.mark.parametrize("op", [operator.floordiv, operator.mod])
def test_division_by_constant_zero_refused(op):
    with pytest.raises(VerifyError, match=r"ShapeDim (//|%): (division|modulo) of S by zero"):
        op(S, 0)


def test_symbolic_dims_have_no_static_order():
    with pytest.raises(VerifyError, match="no static ordering"):
        _ = S < 4
    with pytest.raises(VerifyError, match="no static ordering"):
        _ = 4 <= S + 1  # noqa: SIM300 - the reflected comparison is the point


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (3, True),
        (np.int32(3), True),
        (S, True),
        (S + 1, True),
        (True, False),
        (1.0, False),
        ("S", False),
        (None, False),
    ],
)
def test_is_shape_dim(x, expected):
    assert is_shape_dim(x) is expected


def test_normalize_dim_and_is_static():
    assert type(normalize_dim(np.int64(4))) is int
    assert is_static(4) and is_static(S - S)
    assert not is_static(S) and not is_static(S // 2)
    assert isinstance(S // 2, DimExpr)


# ---- resolve_dim / dim_vars / dim_upper_bound ---------------------------------------------------


@pytest.mark.parametrize(
    ("dim", "bindings", "value"),
    [
        (5, {}, 5),
        (S, {"S": 4}, 4),
        (S, {S: 4}, 4),
        (S, {S: 4, "S": 7}, 4),
        (S + 1, {"S": 4}, 5),
        (2 * S - T, {"S": 4, "T": 3}, 5),
        (S * T, {"S": 4, "T": 3}, 12),
        ((S + 1) // 4, {"S": 7}, 2),
        (S % T, {"S": 7, "T": 3}, 1),
        (dim_min(S, 512), {"S": 600}, 512),
        (dim_max(S, T), {"S": 2, "T": 3}, 3),
        (ceildiv(S, T), {"S": 7, "T": 2}, 4),
        (S, {"S": np.int64(6)}, 6),
    ],
)
def test_resolve_dim(dim, bindings, value):
    result = resolve_dim(dim, bindings)
    assert result == value and type(result) is int


def test_resolve_dim_unbound_names_the_dimvar():
    with pytest.raises(VerifyError, match="DimVar T is unbound"):
        resolve_dim(S + T, {"S": 3})


@pytest.mark.parametrize("value", [True, 2.0, "3"])
def test_resolve_dim_refuses_non_int_binding(value):
    with pytest.raises(VerifyError, match="resolve_dim: DimVar S is bound to non-int"):
        resolve_dim(S, {"S": value})


def test_resolve_dim_refuses_non_mapping():
    with pytest.raises(VerifyError, match="resolve_dim: bindings must be a mapping, got"):
        resolve_dim(S, [("S", 3)])


def test_resolve_dim_symbolic_division_by_zero():
    with pytest.raises(VerifyError, match="divides by zero"):
        resolve_dim(S // T, {"S": 3, "T": 0})


def test_dim_vars():
    assert dim_vars(4) == ()
    assert dim_vars(S) == (S,)
    assert dim_vars(dim_min(U * T, S // 2) + T) == (S, T, U)


C = DimVar("CTX", 1, 8193)


@pytest.mark.parametrize(
    ("dim", "bound"),
    [
        # hir TopK: DimVar.hi - 1, composed through add/mul/floordiv/mod/min/max (inclusive).
        (7, 7),
        (S, 8),
        (S + 2, 10),
        (3 * S, 24),
        (S + T, 12),
        (S * T, 32),
        (S // 2, 4),
        ((S + 1) // 4, 2),
        (S % 4, 3),
        (T % 8, 4),
        (dim_min(S, 5), 5),
        (dim_max(S, T), 8),
        (dim_min(512, C // 4), 512),
        (dim_min(C // 4, 512), 512),
        (ceildiv(S, 4), 2),
        # fails open: subtraction, symbolic divisor (hir TopK), unbounded max side
        (S - 1, None),
        (S - T, None),
        (S // T, None),
        (S % T, None),
        (dim_max(S, S - T), None),
        (dim_min(S - T, S - 1), None),
    ],
)
def test_dim_upper_bound(dim, bound):
    assert dim_upper_bound(dim) == bound


def test_upper_bound_of_product_needs_non_negative_factors():
    neg = DimVar("N", -4, 4)
    assert dim_upper_bound(neg * S) is None
    assert dim_upper_bound(neg + 5) == 8


# ---- property: the normal form preserves meaning ------------------------------------------------

VARS = [DimVar("A", 0, 50), DimVar("B", 1, 50), DimVar("C", 2, 50)]


@st.composite
def affine_programs(draw):
    """A random expression tree over 2-3 DimVars and small ints, built twice: dims and ints."""
    names = VARS[: draw(st.integers(2, 3))]
    values = {v.name: draw(st.integers(v.lo, 40)) for v in names}

    def build(depth):
        if depth == 0 or draw(st.booleans()):
            if draw(st.booleans()):
                v = draw(st.sampled_from(names))
                return v, values[v.name]
            c = draw(st.integers(-6, 6))
            return c, c
        op = draw(st.sampled_from(["+", "-", "*c", "//c", "%c", "min", "max", "*"]))
        a_dim, a_val = build(depth - 1)
        if op in ("*c", "//c", "%c"):
            divisors = st.integers(1, 5) | st.integers(-5, -1)
            c = draw(divisors if op != "*c" else st.integers(-3, 3))
            fn = {"*c": operator.mul, "//c": operator.floordiv, "%c": operator.mod}[op]
            return fn(a_dim, c), fn(a_val, c)
        b_dim, b_val = build(depth - 1)
        fn = {
            "+": (operator.add, operator.add),
            "-": (operator.sub, operator.sub),
            "*": (operator.mul, operator.mul),
            "min": (dim_min, min),
            "max": (dim_max, max),
        }[op]
        return fn[0](a_dim, b_dim), fn[1](a_val, b_val)

    dim, value = build(4)
    return dim, value, values


@settings(max_examples=300, deadline=None)
@given(affine_programs())
def test_resolve_agrees_with_integer_evaluation(program):
    dim, value, bindings = program
    assert resolve_dim(dim, bindings) == value


@settings(max_examples=200, deadline=None)
@given(affine_programs())
def test_upper_bound_is_sound(program):
    # The bindings lie inside every envelope, so the value never exceeds a known bound.
    dim, value, _ = program
    bound = dim_upper_bound(dim)
    if bound is not None:
        assert value <= bound
