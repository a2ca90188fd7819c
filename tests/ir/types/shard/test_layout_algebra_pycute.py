"""Property tests: the layout algebra against its defining postconditions and against pycute.

Every function pycute has is compared on hundreds of random layouts: same shape and stride when
both succeed, and a refusal from us only where pycute itself fails or returns something that breaks
the function's postcondition (we refuse instead of truncating).
"""

from __future__ import annotations

from itertools import pairwise

import pycute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.shard.int_tuple import crd2idx, flatten, idx2crd, unflatten
from tilefoundry.ir.types.shard.layout import (
    Layout,
    coalesce,
    complement,
    composition,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    right_inverse,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)

PROPERTY = settings(max_examples=300, deadline=None)
PYCUTE_FAILURES = (AssertionError, ZeroDivisionError)

extents = st.integers(1, 6)
modes = st.one_of(extents, st.lists(extents, min_size=1, max_size=3).map(tuple))
shapes = st.one_of(extents, st.lists(modes, min_size=1, max_size=3).map(tuple)).filter(
    lambda s: pc.product(s) <= 128
)


SMALL_STRIDES = st.integers(0, 24)


@st.composite
def layouts(draw, shape=shapes, stride=SMALL_STRIDES):
    """Any layout: random (possibly aliasing) strides."""
    s = draw(shape)
    flat = draw(st.lists(stride, min_size=len(flatten(s)), max_size=len(flatten(s))))
    return Layout(s, unflatten(tuple(flat), s))


GAPS = st.integers(1, 3)


@st.composite
def spread_layouts(draw, shape=shapes, gap=GAPS):
    """Injective layouts whose modes, in a random order, step over the span of the previous ones
    times a gap of 1-3: compact with holes and permuted, the inputs complement/products expect."""
    s = draw(shape)
    n = len(flatten(s))
    order = draw(st.permutations(range(n)))
    extent = flatten(s)
    strides = [0] * n
    running = 1
    for k in order:
        running *= draw(gap)
        strides[k] = running
        running *= extent[k]
    return Layout(s, unflatten(tuple(strides), s))


def theirs(layout: Layout) -> pc.Layout:
    return pc.Layout(layout.shape, layout.stride)


def same(ours: Layout, pycute_result: pc.Layout) -> bool:
    return (ours.shape, ours.stride) == (pycute_result.shape, pycute_result.stride)


def images(layout, size=None) -> list:
    return [layout(i) for i in range(layout.size() if size is None else size)]


def attempt(fn, *args):
    """`fn(*args)`, or None when it refuses (VerifyError for us, an assert for pycute)."""
    try:
        return fn(*args)
    except (VerifyError, *PYCUTE_FAILURES):
        return None


# -- crd2idx / idx2crd -------------------------------------------------------------------------


@PROPERTY
@given(layouts())
def test_crd2idx_and_idx2crd_agree_with_pycute(layout):
    shape, stride = layout.shape, layout.stride
    for i in range(layout.size()):
        crd = idx2crd(i, shape)
        assert crd == pc.idx2crd(i, shape)
        assert crd2idx(i, shape, stride) == pc.crd2idx(i, shape, stride)
        assert crd2idx(crd, shape, stride) == crd2idx(i, shape, stride)
        # colexicographic round trip over the compact default stride
        assert crd2idx(crd, shape) == i
        assert layout(crd) == layout(i) == theirs(layout)(i)


# -- coalesce ----------------------------------------------------------------------------------


@PROPERTY
@given(layouts())
def test_coalesce_same_function_fewest_modes_and_pycute(layout):
    result = coalesce(layout)
    assert same(result, pc.coalesce(theirs(layout)))
    assert result.size() == layout.size()
    assert images(result) == images(layout)
    flat = list(zip(flatten(result.shape), flatten(result.stride), strict=True))
    if len(flat) > 1:
        assert all(s != 1 for s, _ in flat)
        assert all(s0 * d0 != d1 for (s0, d0), (_, d1) in pairwise(flat))


@PROPERTY
@given(layouts(shape=shapes.filter(lambda s: isinstance(s, tuple))))
def test_coalesce_by_profile_keeps_rank_and_agrees_with_pycute(layout):
    profile = tuple(1 for _ in layout.shape)
    result = coalesce(layout, profile)
    assert same(result, pc.coalesce(theirs(layout), profile))
    assert result.rank == layout.rank
    assert images(result) == images(layout)


# -- composition -------------------------------------------------------------------------------


def agree_or_justified_refusal(ours_fn, pycute_fn, args, valid):
    """Both succeed with the same layout satisfying `valid`, or we refuse where pycute fails or
    returns a layout that breaks `valid` (`valid` reads only calls, `size()` and modes, which both
    implementations share)."""
    ours = attempt(ours_fn, *args)
    reference = attempt(pycute_fn, *(theirs(x) if isinstance(x, Layout) else x for x in args))
    if ours is None:
        assert reference is None or not valid(reference)
        return None
    assert reference is not None and same(ours, reference)
    assert valid(ours)
    return ours


def inside(b, a) -> bool:
    """B's image lies inside A's domain (beyond it A is only extended by its last mode)."""
    return all(b(i) < a.size() for i in range(b.size()))


def is_composition(result, a, b) -> bool:
    """The defining postcondition: size(R) == size(B) and R(i) == A(B(i)) for every i < size(B)
    whose B(i) is inside A's domain."""
    if result.size() != b.size():
        return False
    return all(result(i) == a(b(i)) for i in range(b.size()) if b(i) < a.size())


def is_mode_composition(result, a, b) -> bool:
    """Composition distributes over B's modes (CuTe: A o (B0, B1) = (A o B0, A o B1)), so for an
    arbitrary B the postcondition holds mode by mode; the whole function agrees only when B's modes
    address disjoint digits of A (checked on spread B below)."""
    if not isinstance(b.shape, tuple):
        return is_composition(result, a, b)
    shape = result.shape
    return (
        isinstance(shape, tuple)
        and len(shape) == len(b.shape)
        and all(is_mode_composition(result[k], a, b[k]) for k in range(len(shape)))
    )


@PROPERTY
@given(
    st.one_of(spread_layouts(), layouts()),
    layouts(stride=st.sampled_from([0, 1, 2, 3, 4, 6, 8])),
)
def test_composition_is_a_then_b_and_agrees_with_pycute(a, b):
    """Issue 20: composition checks its whole postcondition for static inputs and refuses when
    it fails (pycute returns a layout that breaks it for B's modes that overlap in A)."""
    agree_or_justified_refusal(
        composition,
        pc.composition,
        (a, b),
        lambda r: is_mode_composition(r, a, b) and is_composition(r, a, b),
    )


def test_composition_refuses_a_candidate_that_breaks_the_postcondition():
    """Issue 20: `(6,2):(2,1) o (2,3):(3,2)` gives `(2,3):(6,4)` by the mode rules, but
    R(5) = 14 while A(B(5)) = 3, so it is refused; pycute returns the broken layout."""
    a, b = Layout((6, 2), (2, 1)), Layout((2, 3), (3, 2))
    theirs_result = pc.composition(theirs(a), theirs(b))
    assert theirs_result(5) == 14 and a(b(5)) == 3
    with pytest.raises(VerifyError, match=r"R\(5\) = 14, but a\(b\(5\)\) = 3"):
        composition(a, b)


def test_composition_with_an_extent_one_negative_stride_mode():
    """Issue 20: `composition(Layout(4, 16), Layout(1, -32))` has the valid answer `1:-512`."""
    result = composition(Layout(4, 16), Layout(1, -32))
    assert (result.shape, result.stride) == (1, -512)
    assert result(0) == Layout(4, 16)(Layout(1, -32)(0))


@pytest.mark.slow
@PROPERTY
@given(spread_layouts(), st.data())
def test_composition_of_a_subtile_inside_the_domain(a, data):
    """A compact permuted B no larger than A always stays inside A's domain."""
    small = shapes.filter(lambda s: pc.product(s) <= a.size())
    b = data.draw(spread_layouts(shape=small, gap=st.just(1)))
    assert inside(b, a)
    agree_or_justified_refusal(
        composition, pc.composition, (a, b), lambda r: is_composition(r, a, b)
    )


def test_composition_doc_example():
    # CuTe docs: (6,2):(8,2) o (4,3):(3,1) == ((2,2),3):((24,2),8)
    result = composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)))
    assert (result.shape, result.stride) == (((2, 2), 3), ((24, 2), 8))


# -- complement --------------------------------------------------------------------------------


@pytest.mark.slow
@PROPERTY
@given(spread_layouts().filter(lambda s: s.cosize() <= 1024), st.integers(1, 600))
def test_complement_fills_the_rest_and_agrees_with_pycute(layout, max_idx):
    result = complement(layout, max_idx)
    assert same(result, pc.complement(theirs(layout), max_idx))
    assert set(images(layout)) & set(images(result)) == {0}
    whole = make_layout(layout, result)
    assert whole.is_injective()
    # spread layouts tile with their complement: the pair is a bijection onto [0, n), n >= max_idx
    assert sorted(images(whole)) == list(range(whole.size()))
    assert whole.size() >= max_idx


@PROPERTY
@given(layouts(stride=st.integers(-4, 24)), st.integers(1, 100))
def test_complement_of_any_layout_is_disjoint_or_refused(layout, max_idx):
    ours = attempt(complement, layout, max_idx)
    reference = attempt(pc.complement, theirs(layout), max_idx)
    if ours is None:
        # refused where pycute asserts or yields an empty (zero-extent) complement
        assert reference is None or reference.size() == 0
        return
    assert same(ours, reference)
    assert set(images(layout)) & set(images(ours)) == {0}
    if layout.is_injective():
        assert make_layout(layout, ours).is_injective()


def test_complement_doc_example():
    # CuTe docs: complement(4:2, 24) == (2,3):(1,8)
    result = complement(Layout(4, 2), 24)
    assert (result.shape, result.stride) == ((2, 3), (1, 8))


# -- inverses ----------------------------------------------------------------------------------


@PROPERTY
@given(layouts())
def test_right_inverse_and_pycute(layout):
    inverse = right_inverse(layout)
    assert same(inverse, pc.right_inverse(theirs(layout)))
    assert [layout(inverse(i)) for i in range(inverse.size())] == list(range(inverse.size()))


@PROPERTY
@given(spread_layouts())
def test_left_inverse_and_pycute(layout):
    inverse = left_inverse(layout)
    assert same(inverse, pc.left_inverse(theirs(layout)))
    assert [inverse(layout(i)) for i in range(layout.size())] == list(range(layout.size()))


# -- divide / product --------------------------------------------------------------------------


def is_division(result, a, b) -> bool:
    """Mode 0 is the tile (A through B, where B stays inside A's domain); the whole covers A."""
    if result.size() < a.size():
        return False
    tile = result[0]
    return tile.size() == b.size() and all(
        tile(i) == a(b(i)) for i in range(b.size()) if b(i) < a.size()
    )


@pytest.mark.slow
@PROPERTY
@given(spread_layouts(), spread_layouts())
def test_logical_divide_tiles_then_rest_and_agrees_with_pycute(a, b):
    agree_or_justified_refusal(
        logical_divide, pc.logical_divide, (a, b), lambda r: is_division(r, a, b)
    )


def is_product(result, a, b) -> bool:
    """Mode 0 is A itself, mode 1 is B laid over A's complement, and the whole is injective."""
    rest = complement(a, a.size() * b.cosize())
    points = [result(i) for i in range(result.size())]
    return (
        result.size() == a.size() * b.size()
        and [result[0](i) for i in range(a.size())] == images(a)
        and [result[1](j) for j in range(b.size())] == [rest(b(j)) for j in range(b.size())]
        and len(set(points)) == len(points)
    )


@pytest.mark.slow
@PROPERTY
@given(spread_layouts(), spread_layouts())
def test_logical_product_repeats_a_and_agrees_with_pycute(a, b):
    agree_or_justified_refusal(
        logical_product, pc.logical_product, (a, b), lambda r: is_product(r, a, b)
    )


two_modes = st.tuples(modes, modes).filter(lambda s: pc.product(s) <= 128)
tilers = st.tuples(spread_layouts(shape=extents), spread_layouts(shape=extents))


@pytest.mark.slow
@PROPERTY
@given(spread_layouts(shape=two_modes), tilers)
def test_zipped_and_tiled_divide_agree_with_pycute(a, tiler):
    reference = attempt(pc.zipped_divide, theirs(a), tuple(theirs(t) for t in tiler))
    ours = attempt(zipped_divide, a, tiler)
    if ours is None or reference is None:
        assert attempt(logical_divide, a, tiler) is None
        return
    assert same(ours, reference)
    assert same(tiled_divide(a, tiler), pc.tiled_divide(theirs(a), tuple(theirs(t) for t in tiler)))


@pytest.mark.slow
@PROPERTY
@given(spread_layouts(shape=two_modes), tilers)
def test_zipped_and_tiled_product_agree_with_pycute(a, tiler):
    pc_tiler = tuple(theirs(t) for t in tiler)
    ours = attempt(zipped_product, a, tiler)
    if ours is None:
        assert attempt(logical_product, a, tiler) is None
        return
    assert same(ours, pc.zipped_product(theirs(a), pc_tiler))
    assert same(tiled_product(a, tiler), pc.tiled_product(theirs(a), pc_tiler))


@pytest.mark.parametrize(
    ("fn", "a", "b", "shape", "stride"),
    [
        # CuTe docs examples (ecosystem.md §4)
        (logical_divide, Layout(24, 1), Layout(4, 2), (4, (2, 3)), (2, (1, 8))),
        (
            logical_divide,
            Layout((4, 8), (8, 1)),
            (Layout(2, 1), Layout(4, 1)),
            ((2, 2), (4, 2)),
            ((8, 16), (1, 4)),
        ),
        (
            zipped_divide,
            Layout((4, 8), (8, 1)),
            (Layout(2, 1), Layout(4, 1)),
            ((2, 4), (2, 2)),
            ((8, 1), (16, 4)),
        ),
        (logical_product, Layout((2, 2), (4, 1)), Layout(6, 1), ((2, 2), (2, 3)), ((4, 1), (2, 8))),
    ],
)
def test_doc_examples(fn, a, b, shape, stride):
    result = fn(a, b)
    assert (result.shape, result.stride) == (shape, stride)
