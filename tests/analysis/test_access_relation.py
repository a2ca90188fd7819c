"""Access-relation carrier, helper maps and structural readers (visitor-registry §4.1)."""

from __future__ import annotations

import itertools

import islpy as isl
import numpy as np
import pytest

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    AffineAccess,
    BoundaryRelation,
    broadcast_access,
    contraction_relations,
    elementwise_relations,
    identity_access,
    iterating,
    linearized_view,
    permutation_access,
    reduction_dims,
    reduction_relations,
)
from tilefoundry.analysis.access_structure import (
    AffineAxis,
    ConstantAxis,
    PiecewiseAxis,
    Projection,
    QuasiAffineAxis,
    map_axes,
)
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.dims import DimVar


def boundary(text, parameters=()):
    return BoundaryRelation(AffineAccess(isl.Map(text), parameters))


# -- the carrier


def test_bare_map_is_refused_as_a_boundary():
    with pytest.raises(VerifyError, match="a boundary pattern must be an AffineAccess, not Map"):
        BoundaryRelation(isl.Map("{ [i] -> [i] }"))


def test_multi_aff_is_refused_as_a_relation():
    with pytest.raises(VerifyError, match=r"isl\.Map, not MultiAff"):
        AffineAccess(isl.MultiAff("{ [i] -> [i] }"))


@pytest.mark.parametrize(
    ("text", "parameters", "match"),
    [
        pytest.param("[N] -> { [i] -> [i + N] }", (), r"\['N'\] .* must be bound", id="unbound"),
        pytest.param("{ [i] -> [i] }", (("N", "n"),), "must be bound exactly", id="stray"),
        pytest.param(
            "[N] -> { [i] -> [i + N] }", (("N", "n"), ("N", "n")), "bound twice", id="twice"
        ),
        pytest.param(
            "[N, M] -> { [i] -> [i + N + M] }",
            (("N", "n"), ("M", "n")),
            "two isl parameters",
            id="one value two names",
        ),
    ],
)
def test_every_parameter_is_bound_once(text, parameters, match):
    with pytest.raises(VerifyError, match=match):
        AffineAccess(isl.Map(text), parameters)


def test_one_name_is_one_value_across_boundaries():
    with pytest.raises(VerifyError, match="one name is one value"):
        AccessRelations(
            (boundary("[N] -> { [i] -> [i + N] }", (("N", "a"),)),),
            (boundary("[N] -> { [i] -> [i - N] }", (("N", "b"),)),),
        )


def test_at_least_one_output_and_one_domain():
    with pytest.raises(VerifyError, match="at least one output"):
        AccessRelations((boundary("{ [i] -> [i] }"),), ())
    with pytest.raises(VerifyError, match=r"domain ranks differ: \[1, 2\]"):
        AccessRelations((boundary("{ [i] -> [i] }"),), (boundary("{ [i, j] -> [i] }"),))


# -- structural readers


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("{ [i, j] -> [j] }", Projection(1), id="projection"),
        pytest.param("{ [i, j] -> [3] }", ConstantAxis(3), id="constant"),
        pytest.param("{ [i, j] -> [i + 1] }", AffineAxis((1, 0), (), 1), id="translated"),
        pytest.param("{ [i, j] -> [2j] }", AffineAxis((0, 2), (), 0), id="scaled"),
        pytest.param("{ [i, j] -> [i + j] }", AffineAxis((1, 1), (), 0), id="sum"),
        pytest.param("[S] -> { [i] -> [i + S] }", AffineAxis((1,), (("S", 1),), 0), id="param"),
        pytest.param("[S] -> { [i] -> [S] }", AffineAxis((0,), (("S", 1),), 0), id="param-only"),
    ],
)
def test_affine_axis_forms(text, expected):
    assert map_axes(isl.Map(text)) == (expected,)


@pytest.mark.parametrize(
    "text",
    ["{ [i] -> [floor(i/4)] }", "{ [i] -> [i mod 4] }", "{ [i, j] -> [floor((4i + j)/6)] }"],
)
def test_floor_and_mod_are_quasi_affine_never_constant(text):
    (axis,) = map_axes(isl.Map(text))
    assert isinstance(axis, QuasiAffineAxis)
    assert 0 in axis.dims


def test_piecewise_and_non_functional_maps():
    (axis,) = map_axes(isl.Map("{ [i] -> [o] : (o = i and i >= 0) or (o = -i and i < 0) }"))
    assert axis == PiecewiseAxis(frozenset({0}), 2)
    with pytest.raises(VerifyError, match="not single-valued"):
        map_axes(isl.Map("{ [i] -> [o] : 0 <= o < i }"))


# -- helpers


def dims_of(access):
    return [a.dim if isinstance(a, Projection) else a for a in access.axes]


def test_broadcast_access_is_right_aligned():
    assert dims_of(broadcast_access((4, 16, 8), (16, 1))) == [1, ConstantAxis(0)]
    assert dims_of(broadcast_access(3, (1, 8))) == [ConstantAxis(0), 2]
    assert dims_of(broadcast_access((1, 8), (1, 8))) == [0, 1]
    with pytest.raises(VerifyError, match="cannot broadcast"):
        broadcast_access(1, (4, 4))


def test_permutation_access_reads_the_transposed_axes():
    # out[j] = x[perm[j]]: x axis perm[j] is read by domain dim j
    assert dims_of(permutation_access((2, 0, 1))) == [1, 2, 0]
    with pytest.raises(VerifyError, match="not a permutation"):
        permutation_access((0, 0))


def test_elementwise_relations():
    rel = elementwise_relations(2, (4, 8), ((4, 8), (8,)))
    assert [dims_of(b.pattern) for b in rel.inputs] == [[0, 1], [1]]
    assert reduction_dims(rel) == frozenset()


@pytest.mark.parametrize(
    ("axes", "keepdim", "output", "reduced"),
    [
        ((1,), False, [0, 2], {1}),
        ((-1, 0), False, [1], {0, 2}),
        ((1,), True, [0, ConstantAxis(0), 2], {1}),
    ],
)
def test_reduction_relations(axes, keepdim, output, reduced):
    rel = reduction_relations(3, axes, keepdim)
    assert dims_of(rel.outputs[0].pattern) == output
    assert reduction_dims(rel) == reduced


def test_contraction_relations_broadcast_batches():
    rel = contraction_relations((2, 1, 4, 8), (3, 8, 5))
    lhs, rhs = (b.pattern for b in rel.inputs)
    assert dims_of(lhs) == [0, ConstantAxis(0), 2, 4]
    assert dims_of(rhs) == [1, 4, 3]
    assert dims_of(rel.outputs[0].pattern) == [0, 1, 2, 3]
    assert reduction_dims(rel) == {4}


@pytest.mark.parametrize(
    ("out_shape", "in_shape"),
    [
        ((4, 4, 8), (16, 8)),
        ((16, 8), (4, 4, 8)),
        ((6, 4), (4, 6)),
        ((1, 16), (16,)),
        ((16,), (1, 16, 1)),
        ((2, 3, 4), (24,)),
        ((), (1, 1)),
    ],
)
def test_linearized_view_matches_numpy_reshape(out_shape, in_shape):
    relation = linearized_view(out_shape, in_shape).relation
    names = [f"d{i}" for i in range(len(out_shape))]
    for point in itertools.product(*(range(e) for e in out_shape)):
        fix = " and ".join(f"{n} = {v}" for n, v in zip(names, point, strict=True)) or "true"
        image = relation.intersect_domain(isl.Set(f"{{ [{', '.join(names)}] : {fix} }}")).range()
        values = []
        image.foreach_point(lambda p, values=values: values.append(p))
        assert len(values) == 1
        got = tuple(
            values[0].get_coordinate_val(isl.dim_type.set, i).to_python()
            for i in range(len(in_shape))
        )
        linear = np.ravel_multi_index(point, out_shape) if out_shape else 0
        assert got == tuple(int(c) for c in np.unravel_index(linear, in_shape))


def test_linearized_view_keeps_carried_axes_as_projections():
    view = linearized_view((8, 4, 4), (8, 16))
    assert isinstance(view.axes[0], Projection)
    assert isinstance(view.axes[1], AffineAxis)
    split = linearized_view((8, 16), (8, 4, 4))
    assert [type(a) for a in split.axes] == [Projection, QuasiAffineAxis, QuasiAffineAxis]


def test_linearized_view_with_a_symbolic_batch():
    s = DimVar("S", 1, 64)
    assert dims_of(linearized_view((s, 4, 4), (s, 16)))[0] == 0
    with pytest.raises(VerifyError, match="regroups a symbolic extent"):
        linearized_view((s, 4), (4, s))
    with pytest.raises(VerifyError, match="changes the size"):
        linearized_view((4,), (5,))


def test_iterating_binds_symbolic_extents_as_parameters():
    s = DimVar("S", 1, 64)
    rel = iterating(elementwise_relations(1, (s, 8), ((s, 8),)), (s, 8))
    access = rel.inputs[0].pattern
    assert access.parameters == (("S", s),)
    assert access.relation.get_var_names(isl.dim_type.param) == ["S"]
    assert dims_of(access) == [0, 1]


def test_helpers_are_cached():
    assert elementwise_relations(2, (4, 8), ((4, 8), (8,))) is elementwise_relations(
        2, (4, 8), ((4, 8), (8,))
    )
    assert identity_access(3) is identity_access(3)
