"""IntTuple helpers: pycute agreement, bool refusal, None (launch-provided) and symbolic entries."""

from __future__ import annotations

import pycute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.shard.int_tuple import (
    check_int_tuple,
    compatible,
    congruent,
    crd2crd,
    crd2idx,
    elem_scale,
    flatten,
    has_none,
    idx2crd,
    inner_product,
    is_int,
    is_symbolic,
    prefix_product,
    product,
    shape_div,
    unflatten,
    weakly_congruent,
)

extents = st.integers(1, 6)
modes = st.one_of(extents, st.lists(extents, min_size=1, max_size=3).map(tuple))
shapes = st.one_of(extents, st.lists(modes, min_size=1, max_size=3).map(tuple))


class Sym:
    """A stand-in symbolic dim: builds structural expressions, folds nothing."""

    def __init__(self, text: str):
        self.text = text

    def _op(self, op, other, swap=False):
        left, right = (other, self) if swap else (self, other)
        return Sym(f"({left} {op} {right})")

    def __mul__(self, o):
        return self._op("*", o)

    def __rmul__(self, o):
        return self._op("*", o, swap=True)

    def __add__(self, o):
        return self._op("+", o)

    def __radd__(self, o):
        return self._op("+", o, swap=True)

    def __floordiv__(self, o):
        return self._op("//", o)

    def __rfloordiv__(self, o):
        return self._op("//", o, swap=True)

    def __mod__(self, o):
        return self._op("%", o)

    def __rmod__(self, o):
        return self._op("%", o, swap=True)

    def __sub__(self, o):
        return self._op("-", o)

    def __eq__(self, o):
        return isinstance(o, Sym) and o.text == self.text

    def __hash__(self):
        return hash(self.text)

    def __str__(self):
        return self.text

    __repr__ = __str__


N, M = Sym("N"), Sym("M")


# -- entries -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, False, 4.0, "4", [4, 8], (4, True), ((2, [1]),)])
def test_non_entries_are_refused(bad):
    # shard-layout §1: entries are int, a ShapeDim, None or a nested tuple; bool is never an int
    with pytest.raises(VerifyError, match=r"Layout: shape: .* is not an IntTuple entry"):
        check_int_tuple(bad, "Layout: shape")


def test_entry_kinds():
    assert is_int(3) and not is_int(True) and not is_int(None)
    assert is_symbolic(N) and not is_symbolic(4) and not is_symbolic(None)
    assert not is_symbolic(True)
    assert check_int_tuple((None, (N, 4)), "x") == (None, (N, 4))


# -- pycute agreement --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(shapes, st.integers(1, 4))
def test_structure_helpers_agree_with_pycute(shape, init):
    assert flatten(shape) == pc.flatten(shape)
    assert product(shape) == pc.product(shape)
    assert prefix_product(shape, init) == pc.prefix_product(shape, init)
    assert unflatten(flatten(shape), shape) == shape
    assert inner_product(shape, prefix_product(shape)) == pc.inner_product(
        shape, pc.prefix_product(shape)
    )
    assert congruent(shape, prefix_product(shape))


@settings(max_examples=300, deadline=None)
@given(shapes, st.integers(1, 12))
def test_shape_div_agrees_with_pycute_or_both_refuse(shape, divisor):
    try:
        reference = pc.shape_div(shape, divisor)
    except AssertionError:
        refusal = r"shape_div: (neither of -?\d+ and -?\d+ divides the other|division of)"
        with pytest.raises(VerifyError, match=refusal):
            shape_div(shape, divisor)
        return
    assert shape_div(shape, divisor) == reference


@settings(max_examples=300, deadline=None)
@given(shapes.filter(lambda s: pc.product(s) <= 256))
def test_idx2crd_inverts_crd2idx_on_the_compact_stride(shape):
    for i in range(product(shape)):
        crd = idx2crd(i, shape)
        assert crd == pc.idx2crd(i, shape)
        assert crd2idx(crd, shape) == i == pc.crd2idx(crd, shape)
        assert crd2crd(crd, shape) == crd


def test_hand_computed_values():
    # ecosystem.md §4: crd2idx((2,3),(4,8),(8,1)) == 19; idx2crd(11,(4,8)) == (3,2)
    assert crd2idx((2, 3), (4, 8), (8, 1)) == 19
    assert crd2idx(11, (4, 8), (8, 1)) == 3 * 8 + 2 * 1
    assert idx2crd(11, (4, 8)) == (3, 2)
    assert prefix_product((2, (3, 4), 5)) == (1, (2, 6), 24)
    assert shape_div((4, 3), 2) == (2, 3)
    assert shape_div((4, 2), 8) == (1, 1)
    assert elem_scale((2, 3), (4, (1, 5))) == (8, 15)
    assert crd2crd((1, 2), 12, (4, 3)) == 9


@pytest.mark.parametrize(
    ("a", "b", "is_congruent", "is_weak", "is_compatible"),
    [
        ((2, 3), (4, 5), True, True, False),
        ((2, 3), (2, 3), True, True, True),
        (6, (2, 3), False, True, True),
        ((6,), ((2, 3),), False, True, True),
        ((2, 3), 6, False, False, False),
        ((2, (3, 1)), (2, 3), False, False, False),
    ],
)
def test_congruence_relations(a, b, is_congruent, is_weak, is_compatible):
    assert congruent(a, b) is is_congruent
    assert weakly_congruent(a, b) is is_weak
    assert compatible(a, b) is is_compatible


# -- None: launch-provided extents (shard-layout §1) -------------------------------------------


def test_none_propagates_through_products():
    assert has_none((4, (None, 2)))
    assert product((4, None)) is None
    assert prefix_product((4, None, 8)) == (1, 4, None)
    assert elem_scale((2, 3), (None, 1)) == (None, 3)


def test_none_entries_that_are_not_needed_are_fine():
    # shard-layout §1 example: Layout(shape=(None,), strides=(1,))
    assert crd2idx(7, (None,), (1,)) == 7
    assert crd2idx((3, 2), (None, 4), (4, 1)) == 14


@pytest.mark.parametrize(
    ("call", "fn"),
    [
        (lambda: crd2idx(5, (None, 4), (4, 1)), "crd2idx"),
        (lambda: idx2crd(5, (None, 4)), "idx2crd"),
        (lambda: shape_div(None, 4), "shape_div"),
        (lambda: crd2idx((1, 1), (4, 4), (None, 1)), "crd2idx"),
    ],
)
def test_none_where_a_concrete_integer_is_needed_is_refused(call, fn):
    with pytest.raises(VerifyError, match=f"{fn}: needs a concrete"):
        call()


# -- symbolic dims -----------------------------------------------------------------------------


def test_symbolic_entries_are_carried_through_arithmetic():
    assert product((N, 4)) == Sym("(N * 4)")
    assert prefix_product((4, N, 2)) == (1, 4, Sym("(4 * N)"))
    assert crd2idx((Sym("i"), Sym("j")), (N, M), (M, 1)) == Sym("(i * M) + j".join("()"))
    assert idx2crd(Sym("k"), N) == Sym("((k // 1) % N)")
    assert shape_div(N, 1) == N
    assert shape_div(N, N) == 1


@pytest.mark.parametrize(("a", "b"), [(N, 4), (8, N), ((N, 2), M)])
def test_symbolic_division_that_cannot_be_proven_is_refused(a, b):
    with pytest.raises(VerifyError, match="shape_div: cannot prove"):
        shape_div(a, b)


def test_symbolic_equality_is_only_trusted_when_proven():
    assert compatible(N, N)
    assert not compatible(N, M)
    assert not compatible(N, 4)
