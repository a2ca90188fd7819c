"""Layout and ComposedLayout: construction, printing and semantics tables (shard-layout §2–§4)."""

from __future__ import annotations

import pycute as pc
import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.shard.layout import (
    ComposedLayout,
    Layout,
    LayoutBase,
    check_injective,
    coalesce,
    complement,
    composition,
    filter,
    make_layout,
)


class Sym:
    """A stand-in symbolic dim that overloads `*`/`+` structurally and folds nothing."""

    def __init__(self, text: str):
        self.text = text

    def __mul__(self, o):
        return Sym(f"({self} * {o})")

    def __rmul__(self, o):
        return Sym(f"({o} * {self})")

    def __add__(self, o):
        return Sym(f"({self} + {o})")

    def __radd__(self, o):
        return Sym(f"({o} + {self})")

    def __eq__(self, o):
        return isinstance(o, Sym) and o.text == self.text

    def __hash__(self):
        return hash(self.text)

    def __str__(self):
        return self.text

    __repr__ = __str__


N = Sym("N")


# -- Layout construction and printing ----------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "text"),
    [
        (Layout((4, 8), (8, 1)), "(4,8):(8,1)"),
        (Layout(((2, 2), 3), ((24, 2), 8)), "((2,2),3):((24,2),8)"),
        (Layout(12, 1), "12:1"),
        (Layout((4, 8)), "(4,8):?"),  # un-materialised stride prints as `?`
        (Layout((), ()), "():()"),
        (Layout((None,), (1,)), "(None):(1)"),
    ],
)
def test_cute_style_printing(layout, text):
    assert str(layout) == text


def test_stride_none_is_unmaterialised_and_stride_empty_is_rank_zero():
    # shard-layout §3: stride defaults to prefix_product(shape) (DESIGN §4.2: pycute column-major)
    lazy = Layout((4, 8))
    assert lazy.stride is None and lazy.strides is None
    assert lazy.effective_stride == (1, 4) == pc.Layout((4, 8)).stride
    assert lazy.materialized() == Layout((4, 8), (1, 4))
    assert lazy != Layout((4, 8), (1, 4))  # value-equal means field-equal
    assert [lazy(i) for i in range(32)] == list(range(32))
    rank0 = Layout((), ())
    assert rank0.stride == () and rank0.domain_rank == 0 and rank0.size() == 1 and rank0() == 0


def test_value_semantics():
    assert Layout((4, 8), (8, 1)) == Layout((4, 8), (8, 1))
    assert hash(Layout((4, 8), (8, 1))) == hash(Layout((4, 8), (8, 1)))
    assert len({Layout((4, 8), (8, 1)), Layout((4, 8), (8, 1)), Layout((4, 8))}) == 2
    with pytest.raises(AttributeError):
        Layout(4, 1).shape = 8


@pytest.mark.parametrize(
    ("shape", "stride", "message"),
    [
        ((4, 8), (1,), r"Layout: shape \(4,8\) and stride \(1\) are not congruent"),
        ((4, (2, 2)), (1, 4), "not congruent"),
        ((4, True), None, "bool"),  # bool is never an int
        ((4, 8), (1, False), "bool"),
        ([4, 8], None, "list"),
        ((4, -1), None, "negative extent"),
    ],
)
def test_invalid_layouts_are_refused(shape, stride, message):
    with pytest.raises(VerifyError, match=message):
        Layout(shape, stride)


def test_apply_matches_pycute_with_tuple_and_1d_coordinates():
    # ecosystem.md §4: L(2, 3) == 19 and L(11) == 26 (1-D index is colexicographic)
    layout = Layout((4, 8), (8, 1))
    assert layout(2, 3) == layout((2, 3)) == 19
    assert layout(11) == 26
    assert layout.size() == 32 and layout.cosize() == pc.Layout((4, 8), (8, 1)).cosize()
    assert layout.domain_rank == 2 and Layout(((2, 2), 3)).domain_rank == 3
    assert layout[1] == Layout(8, 1)
    assert Layout((4, 8))[1] == Layout(8, 4)  # a mode of an un-materialised layout keeps its step


def test_incongruent_coordinates_are_refused():
    with pytest.raises(VerifyError, match=r"crd2idx: coordinate \(1, 2, 3\) is not congruent"):
        Layout((4, 8), (8, 1))((1, 2, 3))


# -- injectivity (shard-layout §2: no aliasing layouts) ----------------------------------------


@pytest.mark.parametrize(
    ("layout", "injective"),
    [
        (Layout((4, 8), (8, 1)), True),
        (Layout((4, 8)), True),
        (Layout((3, 3), (3, 2)), True),  # interleaved strides, still injective: {2a + 3b}
        (Layout((2, 2), (1, 1)), False),
        (Layout((4, 2), (1, 0)), False),  # broadcast mode
        (Layout((4, 1), (1, 0)), True),  # a stride-0 extent-1 mode aliases nothing
        (Layout((2, 3), (2, 1)), False),  # (1,0) and (0,2) both map to 2
    ],
)
def test_is_injective(layout, injective):
    images = [layout(i) for i in range(layout.size())]
    assert (len(set(images)) == len(images)) is injective  # the table itself is hand-checked
    assert layout.is_injective() is injective


def test_check_injective_names_the_caller():
    assert check_injective(Layout(4, 1), "TensorType") == Layout(4, 1)
    with pytest.raises(VerifyError, match=r"TensorType: layout .* is not injective"):
        check_injective(Layout((2, 2), (1, 1)), "TensorType")


def test_injectivity_with_symbolic_entries_checks_only_the_static_part():
    assert Layout((N, 4), (4, 1)).is_injective()  # unknown strides: assumed (documented)
    assert not Layout((N, 4, 2), (8, 1, 0)).is_injective()  # the static broadcast mode aliases


# -- ComposedLayout (shard-layout §4) ----------------------------------------------------------

OUTER = Layout((2, 3), (3, 1))
INNER = Layout((4, 4), (1, 8))


@pytest.mark.parametrize(
    ("inner", "offset", "outer"),
    [(INNER, 2, OUTER), (None, 2, OUTER), (INNER, 0, None), (INNER, 5, None)],
)
def test_composed_layout_applies_outer_then_offset_then_inner(inner, offset, outer):
    # shard-layout §4: idx = apply(inner, offset + apply(outer, coord)); apply(None, v) == v
    composed = ComposedLayout(inner, offset, outer)
    domain = outer if outer is not None else inner
    for i in range(domain.size()):
        value = offset + (outer(i) if outer is not None else i)
        assert composed(i) == (inner(value) if inner is not None else value)


def test_composed_layout_shape_inheritance():
    # shard-layout §4: shape/domain_rank from outer when present, else inner; () when both None
    assert ComposedLayout(INNER, 1, OUTER).shape == (2, 3)
    assert ComposedLayout(INNER, 1, OUTER).domain_rank == 2
    assert ComposedLayout(INNER, 1, None).shape == (4, 4)
    assert ComposedLayout(None, 1, OUTER).shape == (2, 3)
    both_none = ComposedLayout(None, 3, None)
    assert both_none.shape == () and both_none.domain_rank == 0 and both_none() == 3


def test_composed_layout_with_identity_outer_takes_domain_coordinates():
    # a tuple coordinate of inner's domain is its colexicographic index before the offset
    composed = ComposedLayout(INNER, 1, None)
    assert composed((1, 2)) == INNER(1 + (1 + 2 * 4))


def test_composed_layout_nests_and_is_a_value():
    nested = ComposedLayout(ComposedLayout(INNER, 1, None), 2, OUTER)
    assert isinstance(nested, LayoutBase)
    assert nested(1, 1) == INNER(1 + 2 + OUTER(1, 1))
    assert nested == ComposedLayout(ComposedLayout(INNER, 1, None), 2, OUTER)
    assert len({nested, ComposedLayout(ComposedLayout(INNER, 1, None), 2, OUTER)}) == 1


@pytest.mark.parametrize(
    ("inner", "offset", "outer", "message"),
    [
        ((4, 1), 0, None, "inner must be a LayoutBase"),
        (None, 0, "x", "outer must be a LayoutBase"),
        (None, True, None, "offset must be an integer"),
        (None, (1,), None, "offset must be an integer"),
    ],
)
def test_composed_layout_refusals(inner, offset, outer, message):
    with pytest.raises(VerifyError, match=message):
        ComposedLayout(inner, offset, outer)


def test_composed_layout_injectivity_and_cosize_by_enumeration():
    assert ComposedLayout(INNER, 1, OUTER).is_injective()
    assert not ComposedLayout(Layout((2, 2), (1, 1)), 0, None).is_injective()
    assert ComposedLayout(None, 3, Layout(4, 2)).cosize() == 3 + 6 + 1


# -- algebra on symbolic / None entries and on non-Layout inputs -------------------------------


def test_make_layout_and_coalesce_carry_symbolic_entries():
    layout = make_layout(Layout(N, 1), Layout(4, 1))
    assert layout == Layout((N, 4), (1, 1))
    # N*1 == 1 is not provable, so the modes stay apart: exact, merely not minimal
    assert coalesce(Layout((N, 4), (1, N))) == Layout((N, 4), (1, N))
    assert coalesce(Layout((1, N), (5, 2))) == Layout(N, 2)
    assert filter(Layout((N, 4), (1, 0))) == Layout(N, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: composition(Layout((N, 4), (1, 8)), Layout(2, 1)), "composition: .*symbolic"),
        (lambda: complement(Layout((None, 4), (1, 8)), 64), "complement: .*launch-provided"),
        (lambda: composition(ComposedLayout(INNER, 0, None), 2), "defined on Layout"),
    ],
)
def test_algebra_refuses_what_it_cannot_decide(call, message):
    with pytest.raises(VerifyError, match=message):
        call()
