"""Relation-driven shard propagation: one row per rule of semantic-analysis §3.2."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    AffineAccess,
    BoundaryRelation,
    contraction_relations,
    elementwise_relations,
    identity_access,
    linearized_view,
    permutation_access,
    reduction_relations,
)
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import (
    Broadcast,
    Dynamic,
    Layout,
    Partial,
    ShardLayout,
    Split,
    canonical_shard_layout,
    make_mesh,
)
from tilefoundry.sharding.shard_propagate import (
    derive_output_shard_layout,
    partial_reductions_by_axis,
)

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
B = Broadcast()


def sharded(shape, mesh, *attrs):
    """A tensor whose Split(i) names *logical* axis i (canonical layout)."""
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def with_layout(shape, layout_shape, mesh, *attrs, stride=None):
    """A tensor whose Split(k) names *layout position* k of an explicit layout."""
    sl = ShardLayout(Layout(layout_shape, stride), attrs, mesh)
    return make_tensor_type(shape, f32, layout=sl)


def plain(shape):
    return make_tensor_type(shape, f32)


def boundaries(inputs, output):
    return AccessRelations(tuple(BoundaryRelation(a) for a in inputs), (BoundaryRelation(output),))


def access(text):
    import islpy as isl

    return AffineAccess(isl.Map(text))


TRANSPOSE = boundaries([permutation_access((1, 0))], identity_access(2))
MATMUL = contraction_relations((16, 32), (32, 8))
REDUCE_1 = reduction_relations(2, (1,), False)
SHIFTED = boundaries([access("{ [d0, d1] -> [d0 + 1, d1] }")], identity_access(2))
SCALED = boundaries([access("{ [d0, d1] -> [2d0, d1] }")], identity_access(2))
ROW_0 = boundaries([access("{ [d0] -> [0, d0] }")], identity_access(1))
DIAG_OUT = boundaries([identity_access(1)], access("{ [d0] -> [d0, d0] }"))
SHIFTED_OUT = boundaries([identity_access(2)], access("{ [d0, d1] -> [d0 + 1, d1] }"))

# (id, rule quoted by the message or the row, inputs, relation, output shape, kwargs,
#  expected (layout shape, attrs) | None | error regex)
CASES = [
    # -- no real sharding / mesh constraints
    (
        "plain inputs give no layout",
        "no real sharding",
        (plain((16, 8)), plain((16, 8))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        None,
    ),
    (
        "fully-Broadcast input is replicated",
        "no real sharding",
        (sharded((16, 8), XY, B, B), sharded((16, 8), X, B)),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        None,
    ),
    (
        "replicated input does not pin the mesh",
        "no real sharding",
        (sharded((16, 8), X, Split(0)), sharded((16, 8), XY, B, B)),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        ((4, 4, 8), (Split(0),)),
    ),
    (
        "real sharding on two meshes fails",
        "mesh",
        (sharded((16, 8), X, Split(0)), sharded((16, 8), XY, Split(1), B)),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        r"§3\.2 mesh.*input 1.*share one mesh",
    ),
    (
        "overlapping effect sets fail",
        "DESIGN §4.5",
        (sharded((16, 8), X, Split(1)),),
        REDUCE_1,
        (16,),
        {"partial_reduction_dims": frozenset({1}), "complete_reduction_dims": frozenset({1})},
        r"reduction effects \(DESIGN §4\.5\).*\[1\].*must not overlap",
    ),
    # -- rules 1 and 2: Split through a projection
    (
        "rule 2 elementwise keeps the layout",
        "rule 2",
        (sharded((16, 8), X, Split(0)), plain((16, 8))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        ((4, 4, 8), (Split(0),)),
    ),
    (
        "rule 2 broadcast operand split carries",
        "rule 2",
        (plain((16, 8)), sharded((8,), X, Split(0))),
        elementwise_relations(2, (16, 8), ((16, 8), (8,))),
        (16, 8),
        {},
        ((16, 4, 2), (Split(1),)),
    ),
    (
        "rule 2 transpose moves the split",
        "rule 2",
        (sharded((16, 8), X, Split(0)),),
        TRANSPOSE,
        (8, 16),
        {},
        ((8, 4, 4), (Split(1),)),
    ),
    (
        "rule 2 transpose on two axes",
        "rule 2",
        (sharded((16, 8), XY, Split(1), Split(0)),),
        TRANSPOSE,
        (8, 16),
        {},
        ((2, 4, 4, 4), (Split(0), Split(2))),
    ),
    (
        "rule 2 matmul M split",
        "rule 2",
        (sharded((16, 32), X, Split(0)), plain((32, 8))),
        MATMUL,
        (16, 8),
        {},
        ((4, 4, 8), (Split(0),)),
    ),
    (
        "rule 2 matmul N split",
        "rule 2",
        (plain((16, 32)), sharded((32, 8), XY, B, Split(1))),
        MATMUL,
        (16, 8),
        {},
        ((16, 4, 2), (B, Split(1))),
    ),
    (
        "rule 1 split on a constant-read axis fails",
        "rule 1",
        (plain((16, 8)), sharded((1, 8), make_mesh((1,), ("x",)), Split(0))),
        elementwise_relations(2, (16, 8), ((16, 8), (1, 8))),
        (16, 8),
        {},
        r"rule 1, projection constraint.*input 1.*'x'.*ConstantAxis.*reshard\(x, Broadcast\)",
    ),
    (
        "rule 1 split on a row read at a constant fails",
        "rule 1",
        (sharded((16, 8), X, Split(0)),),
        ROW_0,
        (8,),
        {},
        r"rule 1, projection constraint.*input 0.*'x'.*ConstantAxis",
    ),
    (
        "rule 1 translated access fails",
        "rule 1",
        (sharded((16, 8), X, Split(0)),),
        SHIFTED,
        (16, 8),
        {},
        r"rule 1, projection constraint.*input 0.*AffineAxis",
    ),
    (
        "rule 1 scaled access fails",
        "rule 1",
        (sharded((16, 8), X, Split(0)),),
        SCALED,
        (16, 8),
        {},
        r"rule 1, projection constraint",
    ),
    (
        "rule 1 floor/mod access fails",
        "rule 1",
        (sharded((4, 4, 8), X, Split(1)),),
        boundaries([linearized_view((16, 8), (4, 4, 8))], identity_access(2)),
        (16, 8),
        {},
        r"rule 1, projection constraint.*QuasiAffineAxis",
    ),
    (
        "rule 2 output reached only through translation fails",
        "rule 2",
        (sharded((16, 8), X, Split(0)),),
        SHIFTED_OUT,
        (17, 8),
        {},
        r"rule 2, projection constraint.*domain dim 0",
    ),
    (
        "rule 2 dim read twice by the output fails",
        "rule 2",
        (sharded((16,), X, Split(0)),),
        DIAG_OUT,
        (16, 16),
        {},
        r"rule 2, projection constraint.*exactly one output axis",
    ),
    (
        "rule 2 inner-factor split to another extent fails",
        "rule 2",
        (with_layout((16,), (2, 4, 2), X, Split(1)),),
        boundaries([identity_access(1)], identity_access(1)),
        (32,),
        {},
        r"rule 2.*\(2, 4, 2\).*extent 32",
    ),
    (
        "rule 1 split straddling logical axes fails",
        "rule 1",
        (with_layout((4, 6), (2, 4, 3), X, Split(1)),),
        elementwise_relations(1, (4, 6), ((4, 6),)),
        (4, 6),
        {},
        r"§3\.1 canonical regroup.*position 1",
    ),
    # -- rule 3: reduced Split
    (
        "rule 3 matmul K split becomes Partial(sum)",
        "rule 3",
        (sharded((16, 32), X, Split(1)), sharded((32, 8), X, Split(0))),
        MATMUL,
        (16, 8),
        {"partial_reduction_dims": frozenset({2})},
        ((16, 8), (Partial("sum"),)),
    ),
    (
        "rule 3 K split on y only keeps index 1",
        "rule 3",
        (sharded((16, 32), XY, Split(0), Split(1)), plain((32, 8))),
        MATMUL,
        (16, 8),
        {"partial_reduction_dims": frozenset({2})},
        ((2, 8, 8), (Split(0), Partial("sum"))),
    ),
    (
        "rule 3 complete effect gives Broadcast",
        "rule 3",
        (sharded((16, 8), XY, Split(0), Split(1)),),
        REDUCE_1,
        (16,),
        {"complete_reduction_dims": frozenset({1})},
        ((2, 8), (Split(0), B)),
    ),
    (
        "rule 3 missing effect fails",
        "rule 3",
        (sharded((16, 8), X, Split(1)),),
        REDUCE_1,
        (16,),
        {},
        r"rule 3 \(DESIGN §4\.5\).*input 0.*'x'.*domain dim 1.*no silent default",
    ),
    (
        "rule 3 declared reduction the output reads fails",
        "rule 3",
        (sharded((16, 8), X, Split(0)),),
        REDUCE_1,
        (16,),
        {"partial_reduction_dims": frozenset({0})},
        r"rule 3.*\[0\].*output map reads",
    ),
    # -- rule 4: Partial inputs keep their mesh axis
    (
        "rule 4 Partial on axis 1 stays on axis 1",
        "rule 4",
        (sharded((16, 8), XY, B, Partial("max")),),
        elementwise_relations(1, (16, 8), ((16, 8),)),
        (16, 8),
        {},
        ((16, 8), (B, Partial("max"))),
    ),
    (
        "rule 4 Partial with a Split elsewhere",
        "rule 4",
        (sharded((16, 8), XY, Partial("sum"), Split(1)),),
        TRANSPOSE,
        (8, 16),
        {},
        ((4, 2, 16), (Partial("sum"), Split(0))),
    ),
    (
        "rule 4 same Partial on both inputs",
        "rule 4",
        (sharded((16, 8), XY, B, Partial("sum")), sharded((16, 8), XY, B, Partial("sum"))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        ((16, 8), (B, Partial("sum"))),
    ),
    (
        "rule 4 different reductions on one axis fail",
        "rule 4",
        (sharded((16, 8), XY, B, Partial("sum")), sharded((16, 8), XY, B, Partial("max"))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        r"rule 4\).*mesh axis 1 \('y'\).*Partial\(sum\).*input 0.*Partial\(max\).*input 1",
    ),
    (
        "rule 4 Partial and Split on one axis fail",
        "rule 4",
        (sharded((16, 8), X, Split(0)), sharded((16, 8), X, Partial("sum"))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        r"rule 4/6.*'x'.*Split on input 0.*Partial\(sum\) on input 1.*reshard",
    ),
    (
        "rule 4 reduced Split meets a Partial on the same axis",
        "rule 4",
        (sharded((16, 32), X, Split(1)), sharded((32, 8), X, Partial("sum"))),
        MATMUL,
        (16, 8),
        {"partial_reduction_dims": frozenset({2})},
        r"rule 4/6.*Partial\(sum\) on input 1",
    ),
    # -- rule 5: Broadcast contributes nothing
    (
        "rule 5 Broadcast axis contributes nothing",
        "rule 5",
        (sharded((16, 8), XY, B, Split(1)), sharded((16, 8), XY, B, B)),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        ((16, 4, 2), (B, Split(1))),
    ),
    # -- rule 6: binding consistency
    (
        "rule 6 same dim on two mesh axes fails",
        "rule 6",
        (sharded((16, 8), XY, Split(0), B), sharded((16, 8), XY, B, Split(0))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        r"rule 6\).*inputs 0 and 1.*domain dim 0.*'x'.*'y'",
    ),
    (
        "rule 6 one mesh axis on two dims fails",
        "rule 6",
        (sharded((16, 8), X, Split(0)), sharded((16, 8), X, Split(1))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        r"rule 6\).*'x'.*dim 0 on input 0.*dim 1 on input 1",
    ),
    (
        "rule 6 matmul lhs M and rhs K on one axis fails",
        "rule 6",
        (sharded((16, 32), X, Split(0)), sharded((32, 8), X, Split(0))),
        MATMUL,
        (16, 8),
        {"partial_reduction_dims": frozenset({2})},
        r"rule 6",
    ),
    (
        "rule 6 same binding on both inputs is fine",
        "rule 6",
        (sharded((16, 8), XY, Split(0), Split(1)), sharded((16, 8), XY, Split(0), Split(1))),
        elementwise_relations(2, (16, 8), ((16, 8), (16, 8))),
        (16, 8),
        {},
        ((2, 8, 4, 2), (Split(0), Split(2))),
    ),
    (
        "Dynamic input fails closed",
        "rule 1",
        (sharded((16, 8), XY, Dynamic(), B),),
        elementwise_relations(1, (16, 8), ((16, 8),)),
        (16, 8),
        {},
        r"Dynamic on mesh axis 0",
    ),
]


@pytest.mark.parametrize(
    ("inputs", "relation", "out_shape", "kwargs", "expected"),
    [pytest.param(*row[2:], id=f"{row[1]}: {row[0]}") for row in CASES],
)
def test_rule_table(inputs, relation, out_shape, kwargs, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            derive_output_shard_layout(inputs, relation, out_shape, **kwargs)
        return
    result = derive_output_shard_layout(inputs, relation, out_shape, **kwargs)
    if expected is None:
        assert result is None
        return
    layout_shape, attrs = expected
    assert (tuple(result.layout.shape), tuple(result.attrs)) == (layout_shape, attrs)


def test_every_refusal_names_the_seed_rule():
    for row in CASES:
        if isinstance(row[-1], str):
            with pytest.raises(VerifyError) as info:
                derive_output_shard_layout(row[2], row[3], row[4], **row[5])
            assert "semantic-analysis §3." in str(info.value), row[0]


def test_unnamed_mesh_axis_is_named_by_index():
    mesh = make_mesh((4,))
    inputs = (sharded((16, 8), mesh, Split(1)),)
    with pytest.raises(VerifyError, match=r"mesh axis 0 along domain dim 1"):
        derive_output_shard_layout(inputs, REDUCE_1, (16,))


def test_identity_relation_preserves_an_explicit_layout_and_strides():
    x = with_layout((16, 8), (4, 4, 8), X, Split(0), stride=(0, 8, 1))
    out = derive_output_shard_layout((x,), elementwise_relations(1, (16, 8), ((16, 8),)), (16, 8))
    assert out == x.layout


def test_fresh_strides_are_c_order():
    x = with_layout((16, 8), (4, 4, 8), X, Split(0), stride=(0, 8, 1))
    out = derive_output_shard_layout(
        (x,), elementwise_relations(1, (16, 8), ((16, 8),)), (16, 8), fresh_strides=True
    )
    assert out.layout.stride == (32, 8, 1)


def test_moved_split_gets_c_order_even_for_a_square_layout():
    x = make_tensor_type((4, 4), f32, layout=ShardLayout(Layout((4, 4), (0, 1)), (Split(0),), X))
    out = derive_output_shard_layout((x,), TRANSPOSE, (4, 4))
    assert (out.layout.stride, out.attrs) == ((4, 1), (Split(1),))


def test_partial_reductions_by_axis():
    assert partial_reductions_by_axis(None) == ()
    assert partial_reductions_by_axis(Layout((4,))) == ()
    sl = sharded((16, 8), XY, Split(0), Partial("max")).layout
    assert partial_reductions_by_axis(sl) == (None, "max")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_output_splits_map_back_to_the_split_domain_dims(data):
    """Random projection relations and canonical input shardings on a (2, 4) mesh.

    Independently of the engine: each input Split names a logical axis, the test's own map
    says which domain dim that reads, and the derived output Split position must lie in the
    output axis that reads the same dim (or the mesh axis must be Partial when it is reduced).
    """
    rank = data.draw(st.integers(1, 4), label="domain rank")
    extents = data.draw(st.lists(st.sampled_from([8, 16]), min_size=rank, max_size=rank))
    in_dims = data.draw(st.permutations(range(rank)), label="input reads")
    in_dims = in_dims[: data.draw(st.integers(1, rank))]
    out_dims = data.draw(st.permutations(range(rank)), label="output reads")
    out_dims = out_dims[: data.draw(st.integers(1, rank))]
    reduced = frozenset(range(rank)) - frozenset(out_dims)
    in_shape = tuple(extents[d] for d in in_dims)
    out_shape = tuple(extents[d] for d in out_dims)
    logical_attrs = tuple(
        data.draw(st.sampled_from([B, *(Split(i) for i in range(len(in_shape)))])) for _ in range(2)
    )
    if len({a.axis for a in logical_attrs if isinstance(a, Split)}) < sum(
        isinstance(a, Split) for a in logical_attrs
    ):
        logical_attrs = (logical_attrs[0], B)
    x = make_tensor_type(in_shape, f32, layout=canonical_shard_layout(in_shape, XY, logical_attrs))
    relation = boundaries([access_of(rank, in_dims)], access_of(rank, out_dims))
    out = derive_output_shard_layout((x,), relation, out_shape, partial_reduction_dims=reduced)
    if all(a == B for a in logical_attrs):
        assert out is None
        return
    owner = position_owners(out_shape, tuple(out.layout.shape))
    for mesh_axis, attr in enumerate(logical_attrs):
        if not isinstance(attr, Split):
            assert out.attrs[mesh_axis] == B
            continue
        dim = in_dims[attr.axis]
        if dim in reduced:
            assert out.attrs[mesh_axis] == Partial("sum")
        else:
            assert isinstance(out.attrs[mesh_axis], Split)
            assert out_dims[owner[out.attrs[mesh_axis].axis]] == dim


def access_of(rank, dims):
    return AffineAccess(_parse(rank, dims))


def _parse(rank, dims):
    import islpy as isl

    names = ", ".join(f"d{i}" for i in range(rank))
    return isl.Map(f"{{ [{names}] -> [{', '.join(f'd{d}' for d in dims)}] }}")


def position_owners(logical_shape, layout_shape):
    """Layout position -> logical axis, by walking row-major products (static shapes)."""
    owner, k = {}, 0
    for axis, extent in enumerate(logical_shape):
        product = 1
        while product < extent:
            owner[k] = axis
            product *= layout_shape[k]
            k += 1
        assert product == extent
    return owner


def test_symbolic_split_axis_propagates_whole():
    from tilefoundry.ir.types.dims import DimVar

    s = DimVar("S", 1, 64)
    x = sharded((s, 8), X, Split(0))
    out = derive_output_shard_layout((x,), TRANSPOSE, (8, s))
    assert (tuple(out.layout.shape), out.attrs, out.layout.stride) == ((8, s), (Split(1),), None)
