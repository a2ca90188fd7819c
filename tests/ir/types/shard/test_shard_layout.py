"""Shard attrs, ShardLayout construction rules and the canonical regroup (seed shard §6–§7,
semantic-analysis §3.1, DESIGN §3 and §4.3–§4.4)."""

from __future__ import annotations

import copy
from math import prod

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.dims import DimVar
from tilefoundry.ir.types.shard import (
    B,
    Broadcast,
    ComposedLayout,
    Dynamic,
    Layout,
    Mesh,
    P,
    Partial,
    S,
    ShardLayout,
    Split,
    Topology,
    canonical_shard_layout,
    factor_sugar,
    make_mesh,
    partial_axes,
    per_instance_strides,
    shard_layout_local_shape,
    shared_strides,
    split_positions,
    with_strides,
)

N = DimVar("N", 1, 65)
M4 = make_mesh((4,), ("x",))
M2x4 = make_mesh((2, 4), ("x", "y"))
M4x4 = make_mesh((4, 4), ("x", "y"))
M_SEED = make_mesh((2, 4, 32), ("x", "y", "t"))
M_DYNAMIC = Mesh(Topology("cta", None), Layout((None,), (1,)), ("c",))
M_SYMBOLIC = Mesh(Topology("device", 64), Layout((N,)), ("n",))


# --- shard attrs (seed §6) ----------------------------------------------------------------------


def test_attrs_are_hashable_values_with_compact_text():
    assert Split(1) == S(1) and hash(Split(1)) == hash(S(1)) and Split(1) != Split(0)
    assert Partial() == P("sum") and P("max") != P("min")
    assert Broadcast() == B and Dynamic() == Dynamic() and Dynamic() != B
    assert [repr(a) for a in (S(0), B, P("sum"), P("max"), Dynamic())] == [
        "S(0)",
        "B",
        "P(sum)",
        "P(max)",
        "D",
    ]
    assert len({S(0), S(0), B, Broadcast(), P(), P("sum"), Dynamic()}) == 4


@pytest.mark.parametrize(
    ("section", "build", "match"),
    [
        ("§6 Partial reduction ∈ {sum, max, min}", lambda: P("mean"), "not one of sum, max, min"),
        ("§6 Partial reduction ∈ {sum, max, min}", lambda: Partial("SUM"), "not one of"),
        ("§6 Split(axis) takes an int", lambda: S("0"), "axis must be an int"),
        ("§6 Split(axis) takes an int", lambda: S(True), "axis must be an int"),
        ("DESIGN §3 sugar: B is the attr itself", lambda: B(), "write B, not B()"),
    ],
)
def test_attrs_refuse(section, build, match):
    with pytest.raises(VerifyError, match=match):
        build()


# --- ShardLayout construction (DESIGN §4.3) -------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "layout", "attrs", "mesh"),
    [
        ("§7.2 every mesh axis Broadcast", Layout((8, 16)), (B,), M4),
        ("§7.1.1 canonical Split, extent == mesh extent", Layout((4, 2)), (S(0),), M4),
        ("§7.1.2 strides None (un-materialised)", Layout((2, 4, 3)), (S(0), S(1)), M2x4),
        ("§7.1.2 Split stride 0 (per-instance engine)", Layout((4, 2), (0, 1)), (S(0),), M4),
        ("§7.1.2 Split stride > 0 (shared engine)", Layout((4, 2), (2, 1)), (S(0),), M4),
        ("§7.1.2 strides () for a rank-0 layout", Layout((), ()), (B,), M4),
        ("§6 Partial and Dynamic carry no layout axis", Layout((8,)), (P("max"), Dynamic()), M2x4),
        ("§7.1.1 symbolic G[k] cannot be compared", Layout((N, 2)), (S(0),), M4),
        ("§7.1.1 launch-provided mesh extent", Layout((None, 2)), (S(0),), M_DYNAMIC),
        ("§7.1.2 symbolic Split stride", Layout((4, N), (N, 1)), (S(0),), M4),
        ("§7.1.2 Split on a flat top-level mode", Layout(((2, 3), 4)), (S(2),), M4),
        (
            "§4/§7.1 affine composition",
            ComposedLayout(Layout((8,), (2,)), 0, Layout((4, 2), (2, 1))),
            (S(0),),
            M4,
        ),
    ],
)
def test_shard_layout_accepts(section, layout, attrs, mesh):
    sl = ShardLayout(layout, attrs, mesh)
    assert (sl.layout, sl.attrs, sl.mesh) == (layout, attrs, mesh), section


NON_AFFINE = ComposedLayout(Layout((2, 2), (2, 1)), 0, Layout((4,), (1,)))


@pytest.mark.parametrize(
    ("section", "build", "match"),
    [
        (
            "§7.2 len(attrs) == rank(mesh)",
            lambda: ShardLayout(Layout((2, 4)), (S(0),), M2x4),
            r"1 attrs \(S\(0\),\) for the rank-2 mesh .*§7\.2",
        ),
        (
            "§6 Split axis < domain rank",
            lambda: ShardLayout(Layout((4, 2)), (S(2),), M4),
            r"mesh axis 0 \('x'\) has Split\(2\) but the layout \(4,2\):\? has domain rank 2",
        ),
        (
            "§6 Split axis >= 0",
            lambda: ShardLayout(Layout((4, 2)), (S(-1),), M4),
            r"has Split\(-1\).*§6/§7\.1\.1",
        ),
        (
            "§6 no two Splits on one layout axis",
            lambda: ShardLayout(Layout((4, 4)), (S(0), S(0)), M4x4),
            r"mesh axis 0 \('x'\) and mesh axis 1 \('y'\) both Split layout position 0",
        ),
        (
            "§7.1.1 G[k] == mesh.shape[a]",
            lambda: ShardLayout(Layout((8, 2)), (S(0),), M4),
            r"mesh axis 0 \('x'\) of extent 4 splits layout position 0 of extent 8.*"
            r"\(4 @ m\.x, 8//4\)",
        ),
        (
            "§7.1.2 Split stride ∈ {0} ∪ Z>0",
            lambda: ShardLayout(Layout((4, 2), (-2, 1)), (S(0),), M4),
            r"mesh axis 0 \('x'\) splits layout position 0 whose stride is -2 .*§7\.1\.2",
        ),
        (
            "§7.1.2 Split stride is not a launch-provided None",
            lambda: ShardLayout(Layout((4, 2), (None, 1)), (S(0),), M4),
            "whose stride is None",
        ),
        (
            "§7.1.2 cyclic: Split inside a nested mode",
            lambda: ShardLayout(Layout(((4, 2), 3)), (S(0),), M4),
            r"inside the nested mode \(4, 2\).*cyclic / interleaved",
        ),
        (
            "§7.1.2 interleaved: non-affine composition",
            lambda: ShardLayout(NON_AFFINE, (S(0),), M4),
            r"several strides \[-1, 2\].*cyclic / interleaved",
        ),
        (
            "§7.1.2 Split stride ∈ {0} ∪ Z>0, measured through a composition",
            lambda: ShardLayout(ComposedLayout(Layout((4,), (-1,)), 3, Layout((4,))), (S(0),), M4),
            r"whose stride is -1 \(shard §7\.1\.2",
        ),
        (
            "§7.1.2 composition over a symbolic domain is not verifiable",
            lambda: ShardLayout(ComposedLayout(Layout((8,)), 0, Layout((N,))), (S(0),), M4),
            "cannot be verified",
        ),
        (
            "§7.1.2 strides of matching rank (Layout congruence)",
            lambda: ShardLayout(Layout((4, 2), (1,)), (S(0),), M4),
            "not congruent",
        ),
        (
            "§7.1 layout is a LayoutBase",
            lambda: ShardLayout((4, 2), (S(0),), M4),
            "layout must be a LayoutBase",
        ),
        (
            "§7.3 mesh is a Mesh",
            lambda: ShardLayout(Layout((4, 2)), (S(0),), (4,)),
            "mesh must be a Mesh",
        ),
        (
            "§7.2 attrs is a tuple",
            lambda: ShardLayout(Layout((4, 2)), S(0), M4),
            "attrs must be a tuple",
        ),
        (
            "§6 attrs are instances",
            lambda: ShardLayout(Layout((4, 2)), (Broadcast,), M4),
            "is not a Split/Broadcast/Dynamic/Partial",
        ),
        (
            "§6 attrs are instances",
            lambda: ShardLayout(Layout((4, 2)), ("S(0)",), M4),
            "is not a Split/Broadcast/Dynamic/Partial",
        ),
    ],
)
def test_shard_layout_refuses(section, build, match):
    with pytest.raises(VerifyError, match=match) as caught:
        build()
    message = str(caught.value)
    if "congruent" not in match:
        assert message.startswith("ShardLayout: "), section
        assert "§" in message and "; " in message, "names the rule and the fix"


def test_shard_layout_is_a_value_over_its_layout():
    sl = ShardLayout(Layout((4, 2), (2, 1)), (S(0),), M4)
    twin = ShardLayout(Layout((4, 2), (2, 1)), [S(0)], M4)
    assert sl == twin and hash(sl) == hash(twin) and {sl: 1}[twin] == 1
    assert sl != ShardLayout(Layout((4, 2), (0, 1)), (S(0),), M4)
    assert sl != ShardLayout(Layout((4, 2), (2, 1)), (B,), M4)
    assert (sl.shape, sl.domain_rank, sl.size()) == ((4, 2), 2, 8)
    assert [sl(i, j) for i in range(4) for j in range(2)] == list(range(8))
    assert sl.is_injective() and sl.cosize() == 8
    assert copy.deepcopy(sl) is sl
    with pytest.raises(AttributeError, match="immutable"):
        sl.attrs = (B,)
    assert repr(sl) == "ShardLayout((4,2):(2,1), (S(0),), Mesh(device[4]: x=4))"


def test_split_positions_and_partial_axes():
    sl = ShardLayout(Layout((4, 2, 2)), (S(2), P("max"), S(0)), make_mesh((2, 3, 4)))
    assert split_positions(sl) == {2: 0, 0: 2}
    assert partial_axes(sl) == (1,)


# --- local shape and stride materialisation (seed §7.1.1, §7.1.2, §7.5) ---------------------------


@pytest.mark.parametrize(
    ("section", "sl", "local"),
    [
        ("§7.1.1 Split dims are 1", ShardLayout(Layout((4, 2, 3)), (S(0),), M4), (1, 2, 3)),
        ("§7.1.1 Broadcast keeps G", ShardLayout(Layout((4, 2)), (B,), M4), (4, 2)),
        ("§7.1.1 Partial keeps G", ShardLayout(Layout((4, 2)), (P(),), M4), (4, 2)),
        ("§7.1.1 flat positions", ShardLayout(Layout(((2, 3), 4)), (S(2),), M4), (2, 3, 1)),
        ("§7.1.1 symbolic whole split", ShardLayout(Layout((N, 2)), (S(0),), M4), (N // 4, 2)),
        ("§7.1.1 same unknown extent", ShardLayout(Layout((None,)), (S(0),), M_DYNAMIC), (1,)),
        ("§7.1.1 unknown G[k]", ShardLayout(Layout((None, 2)), (S(0),), M4), (None, 2)),
        ("§7.1.1 symbolic mesh extent", ShardLayout(Layout((N,)), (S(0),), M_SYMBOLIC), (1,)),
    ],
)
def test_local_shape(section, sl, local):
    assert shard_layout_local_shape(sl) == local, section


def test_local_shape_refuses_an_unknown_division():
    sl = ShardLayout(Layout((8,)), (S(0),), M_SYMBOLIC)
    with pytest.raises(VerifyError, match=r"mesh axis 0 \('n'\) has extent N.*local extent"):
        shard_layout_local_shape(sl)


@pytest.mark.parametrize(
    ("sl", "per_instance", "shared"),
    [
        (ShardLayout(Layout((4, 2, 3)), (S(0),), M4), (0, 3, 1), (6, 3, 1)),
        (ShardLayout(Layout((4, 1, 3)), (B,), M4), (3, 0, 1), (3, 3, 1)),
        (ShardLayout(Layout((2, 4)), (S(1), S(0)), make_mesh((4, 2))), (0, 0), (4, 1)),
        (ShardLayout(Layout((4, N)), (S(0),), M4), (0, 1), (N, 1)),
    ],
)
def test_stride_materialisation(sl, per_instance, shared):
    assert per_instance_strides(sl) == per_instance
    assert shared_strides(sl) == shared


def test_materialisation_refuses_launch_provided_extents():
    sl = ShardLayout(Layout((4, None)), (S(0),), M4)
    for materialise in (per_instance_strides, shared_strides):
        with pytest.raises(VerifyError, match="launch-provided extent"):
            materialise(sl)


def test_with_strides_rebuilds_and_rechecks():
    sl = ShardLayout(Layout(((2, 3), 4)), (S(2),), M4)
    assert with_strides(sl, (12, 4, 0)).layout == Layout(((2, 3), 4), ((12, 4), 0))
    assert with_strides(sl, ((12, 4), 1)).layout == Layout(((2, 3), 4), ((12, 4), 1))
    assert with_strides(sl, None).layout == Layout(((2, 3), 4))
    with pytest.raises(VerifyError, match=r"2 strides \(1, 0\) for the domain rank 3"):
        with_strides(sl, (1, 0))
    with pytest.raises(VerifyError, match="whose stride is -1"):
        with_strides(sl, (12, 4, -1))
    composed = ShardLayout(ComposedLayout(None, 0, Layout((4,))), (S(0),), M4)
    with pytest.raises(VerifyError, match="cannot set strides on the ComposedLayout"):
        with_strides(composed, (1,))


def _from_sugar(entries, mesh):
    """A ShardLayout from layout-sugar entries `(extent, mesh axes | None)`, as the parser builds
    one: each entry becomes its factor_sugar positions, a Split per mesh axis, strides None."""
    shape, split_at = [], {}
    for extent, axes in entries:
        parts = ((extent, None),) if axes is None else factor_sugar(extent, axes)
        for part, axis in parts:
            if axis is not None:
                split_at[axis.index] = len(shape)
            shape.append(part)
    attrs = tuple(S(split_at[a]) if a in split_at else B for a in range(mesh.rank))
    return ShardLayout(Layout(tuple(shape)), attrs, mesh)


def test_seed_7_5_example():
    """Seed §7.5 with the DESIGN §4.4 attrs; every number is the seed's own."""
    m = M_SEED
    sl = _from_sugar(((2, m.x), (12, m.y), (128, m.t)), m)
    assert sl.layout == Layout((2, 4, 3, 32, 4), None)
    assert sl.attrs == (Split(0), Split(1), Split(3))
    assert shard_layout_local_shape(sl) == (1, 1, 3, 1, 4)
    assert per_instance_strides(sl) == (0, 0, 4, 0, 1)
    assert shared_strides(sl) == (1536, 384, 128, 4, 1)
    high_to_low = with_strides(sl, per_instance_strides(sl))
    assert high_to_low.layout == Layout((2, 4, 3, 32, 4), (0, 0, 4, 0, 1))
    assert with_strides(sl, shared_strides(sl)).layout.stride == (1536, 384, 128, 4, 1)


# --- canonical regroup (seed §7.1.1, semantic-analysis §3.1, parser §1.5) ------------------------


@pytest.mark.parametrize(
    ("section", "extent", "axes", "positions"),
    [
        ("§7.1.1 N > ext: (ext @ a, N // ext)", 12, M2x4.y, ((4, M2x4.y), (3, None))),
        ("§7.1.1 residual 1 dropped", 4, M2x4.y, ((4, M2x4.y),)),
        ("§7.1.1 one-tuple of axes", 8, (M2x4.x,), ((2, M2x4.x), (4, None))),
        (
            "parser §1.5 N @ (a, b): one position per axis, then residual",
            1536,
            (M_SEED.y, M_SEED.t),
            ((4, M_SEED.y), (32, M_SEED.t), (12, None)),
        ),
        ("parser §1.5 axes in the written order", 8, (M2x4.y, M2x4.x), ((4, M2x4.y), (2, M2x4.x))),
        ("§7.1.1 symbolic extent stays whole", N, M2x4.y, ((N, M2x4.y),)),
        ("§7.1.1 launch-provided mesh extent", 8, M_DYNAMIC.c, ((8, M_DYNAMIC.c),)),
    ],
)
def test_factor_sugar(section, extent, axes, positions):
    assert factor_sugar(extent, axes) == positions, section


@pytest.mark.parametrize(
    ("section", "extent", "axes", "match"),
    [
        ("§7.1.1 divisible", 6, M2x4.y, r"extent 6 is not divisible by 4 \(mesh axis 1 \('y'\)\)"),
        ("parser §1.5 N < ext is indivisible", 2, M2x4.y, "not divisible by 4"),
        (
            "§7.1.1 divisible by the product",
            12,
            (M2x4.x, M2x4.y),
            r"not divisible by 8 \(mesh axis 0 \('x'\) and mesh axis 1 \('y'\)\)",
        ),
        ("§7.1.1 symbolic over two axes", N, (M2x4.x, M2x4.y), "cannot be factored"),
        ("§6 one mesh axis once", 16, (M2x4.y, M2x4.y), "binds a mesh axis twice"),
        ("parser §1.5 needs an axis", 8, (), "non-empty tuple"),
        ("parser §1.5 axes from a mesh", 8, ("y",), "is not a mesh axis"),
    ],
)
def test_factor_sugar_refuses(section, extent, axes, match):
    with pytest.raises(VerifyError, match=match):
        factor_sugar(extent, axes)


@pytest.mark.parametrize(
    ("section", "logical", "mesh", "logical_attrs", "layout", "layout_attrs"),
    [
        (
            "spec facts §1.1 example",
            (16, 8),
            make_mesh((4,)),
            (S(0),),
            Layout((4, 4, 8), (32, 8, 1)),
            (S(0),),
        ),
        (
            "§7.1.1 split the last axis",
            (16, 8),
            M4,
            (S(1),),
            Layout((16, 4, 2), (8, 2, 1)),
            (S(1),),
        ),
        ("§7.1.1 residual 1 dropped", (4, 8), M4, (S(0),), Layout((4, 8), (8, 1)), (S(0),)),
        (
            "§3.1 two mesh axes on one logical axis, mesh-axis order",
            (16,),
            M2x4,
            (S(0), S(0)),
            Layout((2, 4, 2), (8, 2, 1)),
            (S(0), S(1)),
        ),
        (
            "§3.1 Splits renumbered to layout positions",
            (8, 6),
            M2x4,
            (S(1), S(0)),
            Layout((4, 2, 2, 3), (12, 6, 3, 1)),
            (S(2), S(0)),
        ),
        (
            "§6 Broadcast/Partial/Dynamic pass through",
            (8, 4),
            make_mesh((2, 2, 4)),
            (P("min"), Dynamic(), S(1)),
            Layout((8, 4), (4, 1)),
            (P("min"), Dynamic(), S(1)),
        ),
        ("§7.2 rank-0 tensor, all Broadcast", (), M4, (B,), Layout((), ()), (B,)),
        (
            "§7.1.2 symbolic extent: strides None, single-axis split stays whole",
            (N, 8),
            M4,
            (S(0),),
            Layout((N, 8), None),
            (S(0),),
        ),
        (
            "§7.1.2 symbolic unsplit axis: strides None",
            (8, N),
            M4,
            (S(0),),
            Layout((4, 2, N), None),
            (S(0),),
        ),
    ],
)
def test_canonical_shard_layout(section, logical, mesh, logical_attrs, layout, layout_attrs):
    sl = canonical_shard_layout(logical, mesh, logical_attrs)
    assert (sl.layout, sl.attrs, sl.mesh) == (layout, layout_attrs, mesh), section


@pytest.mark.parametrize(
    ("section", "logical", "mesh", "attrs", "match"),
    [
        ("§7.1.1 indivisible split", (6, 8), M4, (S(0),), "extent 6 is not divisible by 4"),
        (
            "DESIGN §3 Split(i) names a logical axis",
            (16, 8),
            M4,
            (S(2),),
            r"mesh axis 0 \('x'\) has Split\(2\) but the logical shape \(16, 8\) has rank 2",
        ),
        ("DESIGN §3 logical axis >= 0", (16, 8), M4, (S(-1),), r"has Split\(-1\)"),
        ("§7.2 one attr per mesh axis", (16, 8), M2x4, (S(0),), "1 attrs"),
        ("§7.1.1 symbolic axis over two mesh axes", (N,), M2x4, (S(0), S(0)), "cannot be factored"),
        ("§7.1.1 logical shape is a tuple", 16, M4, (S(0),), "logical shape must be a tuple"),
        ("§7.3 mesh is a Mesh", (16,), (4,), (S(0),), "mesh must be a Mesh"),
    ],
)
def test_canonical_shard_layout_refuses(section, logical, mesh, attrs, match):
    with pytest.raises(VerifyError, match=match):
        canonical_shard_layout(logical, mesh, attrs)


@st.composite
def logical_splits(draw):
    """A random mesh, logical attrs over it, and a logical shape those attrs divide exactly."""
    mesh_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    rank = draw(st.integers(1, 3))
    attrs = tuple(
        draw(st.one_of(st.just(B), st.just(P("sum")), st.builds(S, st.integers(0, rank - 1))))
        for _ in mesh_shape
    )
    logical = tuple(
        prod(e for e, a in zip(mesh_shape, attrs, strict=True) if a == S(axis))
        * draw(st.integers(1, 4))
        for axis in range(rank)
    )
    return make_mesh(mesh_shape), logical, attrs


@given(logical_splits())
def test_canonical_regroup_properties(case):
    mesh, logical, logical_attrs = case
    sl = canonical_shard_layout(logical, mesh, logical_attrs)
    shape = sl.layout.shape
    assert prod(shape) == prod(logical)
    split_mesh_extents = 1
    for mesh_axis, attr in enumerate(sl.attrs):
        if isinstance(attr, Split):
            assert shape[attr.axis] == mesh.shape[mesh_axis]
            split_mesh_extents *= mesh.shape[mesh_axis]
        else:
            assert attr == logical_attrs[mesh_axis]
    assert prod(shard_layout_local_shape(sl)) == prod(logical) // split_mesh_extents
    assert sl.layout.stride == shared_strides(sl)
