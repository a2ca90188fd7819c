"""Splits on inner factors of a logical axis are simulated (DESIGN §4.12, issue 15 item 1).

Shard-layout §7.1.1/§7.2: a ShardLayout's domain G factors each logical axis (the canonical
regroup linearises both row-major, semantic-analysis §3.1), and `Split(k)` substitutes the mesh
coordinate into factor k. When k is not the outermost factor, each device holds a strided set of
the axis. The oracle here derives ownership element by element from that definition, by hand
(divmod over the factors), independently of the evaluator's index sets; every execution is
compared with numpy on the global arrays.
"""

import itertools
from math import prod

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from support.functions import call, function_of
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate, gather, scatter
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.hir.tensor import Gather, Reduce, ReduceKind
from tilefoundry.ir.types import f32, i32, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, Split, make_mesh

ROW = make_mesh((4,), ("x",))
GRID = make_mesh((3, 4), ("a", "b"))
PAIR_BY_FOUR = make_mesh((2, 4), ("p", "q"))


def c_strides(shape):
    return tuple(prod(shape[i + 1 :]) for i in range(len(shape)))


def typed(shape, factors, attrs, mesh):
    layout = ShardLayout(Layout(factors, c_strides(factors)), attrs, mesh)
    return make_tensor_type(shape, f32, layout=layout)


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (logical shape, per logical axis its factors of G, attrs, mesh)
CASES = {
    "8 as (2,4), inner 4 split": ((8,), ((2, 4),), (Split(1),), ROW),
    "24 as (2,3,4), both inner factors split": ((24,), ((2, 3, 4),), (Split(1), Split(2)), GRID),
    "16 as (2,2,4), outer and innermost split": (
        (16,),
        ((2, 2, 4),),
        (Split(0), Split(2)),
        PAIR_BY_FOUR,
    ),
    "(6,8) with 8 as (2,4), inner split": ((6, 8), ((6,), (2, 4)), (Split(2),), ROW),
    "(4,8) both axes inner split on a 2x4 mesh": (
        (4, 8),
        ((2, 2), (2, 4)),
        (Split(1), Split(3)),
        PAIR_BY_FOUR,
    ),
    "(4,12) inner split, other mesh axis Broadcast": ((4, 12), ((4,), (3, 4)), (B, Split(2)), GRID),
}


def case_type(name):
    shape, per_axis, attrs, mesh = CASES[name]
    return typed(shape, tuple(f for axis in per_axis for f in axis), attrs, mesh)


def expected_shards(x, per_axis, attrs, mesh):
    """Each device's shard, by hand: every global coordinate is split into its digits over the
    factors of its axis (row-major); a mesh axis with Split(k) owns the element on the device
    whose coordinate there is digit k (§7.2); the element's place in the shard is the row-major
    number of its unsplit digits on each axis (the local shape is G with split factors 1)."""
    positions, start = [], 0
    for factors in per_axis:
        positions.append(list(range(start, start + len(factors))))
        start += len(factors)
    split_of = {a.axis: m for m, a in enumerate(attrs) if isinstance(a, Split)}
    local_shape = tuple(
        prod(f for f, p in zip(factors, ps, strict=True) if p not in split_of)
        for factors, ps in zip(per_axis, positions, strict=True)
    )
    shards = {
        c: np.full(local_shape, np.nan, np.float32)
        for c in itertools.product(*map(range, mesh.shape))
    }
    filled = {c: np.zeros(local_shape, int) for c in shards}
    for coord in itertools.product(*map(range, x.shape)):
        owner: dict[int, int] = {}
        local = []
        for axis, index in enumerate(coord):
            digits = []
            for factor in reversed(per_axis[axis]):
                index, digit = divmod(index, factor)
                digits.append(digit)
            digits.reverse()
            number = 0
            for p, factor, digit in zip(positions[axis], per_axis[axis], digits, strict=True):
                if p in split_of:
                    owner[split_of[p]] = digit
                else:
                    number = number * factor + digit
            local.append(number)
        for device in shards:
            if all(device[m] == d for m, d in owner.items()):
                shards[device][tuple(local)] = x[coord]
                filled[device][tuple(local)] += 1
    assert all((f == 1).all() for f in filled.values()), "the oracle must fill each slot once"
    return shards


@pytest.mark.parametrize("name", sorted(CASES))
def test_scatter_places_exactly_the_elements_the_layout_algebra_assigns(name):
    shape, per_axis, attrs, mesh = CASES[name]
    x = rand(*shape)
    placed = scatter(x, case_type(name), "test")
    want = expected_shards(x, per_axis, attrs, mesh)
    assert set(placed.shards) == set(want)
    for device, shard in want.items():
        np.testing.assert_array_equal(placed.shards[device], shard, err_msg=str(device))
    np.testing.assert_array_equal(gather(placed, "test"), x)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_elementwise_chain_round_trips_through_the_strided_shares(name):
    """scatter, exp(a) * a + a on every device's share, gather: equal to numpy."""
    type_ = case_type(name)

    def body(a):
        product = call(Binary(kind=BinaryKind.MUL), call(Unary(kind=UnaryKind.EXP), a), a)
        return call(Binary(kind=BinaryKind.ADD), product, a)

    f = function_of({"a": type_}, body)
    assert f.body.type.layout == type_.layout  # the result keeps the strided split
    x = rand(*type_.shape, seed=3)
    np.testing.assert_allclose(evaluate(f, x), np.exp(x) * x + x, rtol=1e-6)


def _replicate(value, shape, mesh):
    layout = ShardLayout(Layout(shape), (B,) * mesh.rank, mesh)
    return call(Reshard(layout=layout), value)


def test_a_matmul_contracting_an_inner_split_axis_on_both_operands():
    """K = 8 as (2, 4) with the inner 4 split on both sides: each device multiplies its strided
    K columns by the same K rows, leaving Partial(sum) addends that the Reshard completes."""
    lhs = typed((3, 8), (3, 2, 4), (Split(2),), ROW)
    rhs = typed((8, 5), (2, 4, 5), (Split(1),), ROW)
    f = function_of(
        {"a": lhs, "b": rhs}, lambda a, b: _replicate(call(MatMul(), a, b), (3, 5), ROW)
    )
    a, b = rand(3, 8), rand(8, 5, seed=1)
    out = evaluate(f, a, b)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_a_matmul_with_an_inner_split_lhs_and_a_replicated_rhs():
    """The replicated rhs is cut locally to the same strided K set (no communication)."""
    lhs = typed((3, 8), (3, 2, 4), (Split(2),), ROW)
    f = function_of(
        {"a": lhs, "b": make_tensor_type((8, 5), f32)},
        lambda a, b: _replicate(call(MatMul(), a, b), (3, 5), ROW),
    )
    a, b = rand(3, 8), rand(8, 5, seed=1)
    np.testing.assert_allclose(evaluate(f, a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_a_matmul_whose_rows_are_inner_split_keeps_the_strided_rows():
    lhs = typed((8, 6), (2, 4, 6), (Split(1),), ROW)
    f = function_of(
        {"a": lhs, "b": make_tensor_type((6, 5), f32)}, lambda a, b: call(MatMul(), a, b)
    )
    a, b = rand(8, 6), rand(6, 5, seed=1)
    np.testing.assert_allclose(evaluate(f, a, b), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-6)


def test_a_sum_over_an_inner_split_axis_all_reduces_to_one_global_value():
    x_type = case_type("(4,8) both axes inner split on a 2x4 mesh")
    f = function_of(
        {"x": x_type},
        lambda x: call(Reduce(axes=(1,), keepdim=False, kind=ReduceKind.SUM), x),
    )
    x = rand(4, 8)
    np.testing.assert_allclose(evaluate(f, x), x.astype(np.float64).sum(axis=1), rtol=1e-5)


def test_a_gather_on_an_inner_split_axis_looks_up_only_the_owned_rows():
    x_type = typed((8, 3), (2, 4, 3), (Split(1),), ROW)
    f = function_of(
        {"x": x_type, "i": make_tensor_type((5,), i32)},
        lambda x, i: _replicate(call(Gather(axis=0), x, i), (5, 3), ROW),
    )
    x, i = rand(8, 3), np.array([7, 0, 3, 3, 5], dtype=np.int32)
    np.testing.assert_array_equal(evaluate(f, x, i), x[i])


def test_operands_split_on_different_factors_of_one_dim_are_refused_by_typeinfer():
    """Inner split on one side, outer on the other: no device holds matching K sets, so shard
    propagation refuses the call (semantic-analysis §3.2 rule 6) before anything runs."""
    lhs = typed((3, 8), (3, 2, 4), (Split(2),), ROW)
    rhs = typed((8, 5), (4, 2, 5), (Split(0),), ROW)
    with pytest.raises(VerifyError, match=r"MatMul: .*incompatibly"):
        function_of({"a": lhs, "b": rhs}, lambda a, b: call(MatMul(), a, b))


MESHES = (make_mesh((2,), ("x",)), make_mesh((4,), ("x",)), make_mesh((2, 3), ("a", "b")))


@st.composite
def strided_layouts(draw):
    """A logical shape, a factorisation of each axis into layout factors, and a Split of some
    factors whose extent matches a mesh axis (outer or inner, at random)."""
    mesh = draw(st.sampled_from(MESHES))
    rank = draw(st.integers(1, 2))
    per_axis = tuple(
        tuple(draw(st.lists(st.sampled_from((1, 2, 3, 4)), min_size=1, max_size=3)))
        for _ in range(rank)
    )
    flat = [f for factors in per_axis for f in factors]
    attrs, used = [], set()
    for extent in mesh.shape:
        options = [k for k, f in enumerate(flat) if f == extent and k not in used]
        if options and draw(st.booleans()):
            k = draw(st.sampled_from(options))
            used.add(k)
            attrs.append(Split(k))
        else:
            attrs.append(B)
    assume(used)
    shape = tuple(prod(factors) for factors in per_axis)
    return shape, per_axis, tuple(attrs), mesh


@settings(max_examples=60, deadline=None)
@given(case=strided_layouts(), seed=st.integers(0, 2**16))
def test_random_factor_splits_place_and_compute_like_the_layout_algebra_says(case, seed):
    """Property: for random factorisations and Splits (shard-layout §7.1.1/§7.2), scatter gives
    each device exactly the by-hand shares, gather inverts it, and an elementwise op on the
    shares equals numpy."""
    shape, per_axis, attrs, mesh = case
    type_ = typed(shape, tuple(f for axis in per_axis for f in axis), attrs, mesh)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    placed = scatter(x, type_, "test")
    for device, shard in expected_shards(x, per_axis, attrs, mesh).items():
        np.testing.assert_array_equal(placed.shards[device], shard, err_msg=str(device))
    np.testing.assert_array_equal(gather(placed, "test"), x)
    f = function_of({"a": type_}, lambda a: call(Unary(kind=UnaryKind.NEG), a))
    np.testing.assert_array_equal(evaluate(f, x), -x)
