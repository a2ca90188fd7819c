"""Topology, Mesh, MeshAxis and make_mesh (seed shard §5, DESIGN §4.1)."""

from __future__ import annotations

import copy
import dataclasses
import itertools

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types.dims import DimVar
from tilefoundry.ir.types.shard import ComposedLayout, Layout, Mesh, MeshAxis, Topology, make_mesh
from tilefoundry.ir.types.shard.mesh import c_order_strides

N = DimVar("N", 1, 65)


def mesh_2x4() -> Mesh:
    return make_mesh((2, 4), ("x", "y"))


# --- Topology (seed §5: name + num_devices | None) -------------------------------------------


@pytest.mark.parametrize(
    ("section", "name", "count"),
    [
        ("§5 static count", "device", 8),
        ("§5 launch-provided extent", "cta", None),
    ],
)
def test_topology_accepts(section, name, count):
    topology = Topology(name, count)
    assert (topology.name, topology.num_devices) == (name, count), section


@pytest.mark.parametrize(
    ("section", "name", "count", "match"),
    [
        ("§5 name is a str", 3, 4, "non-empty str"),
        ("§5 name is non-empty", "", 4, "non-empty str"),
        ("§5 count is positive", "device", 0, "positive int or None"),
        ("§5 count is positive", "device", -2, "positive int or None"),
        ("§5 count is an int, not a bool", "device", True, "positive int or None"),
        ("§5 count is an int, not a float", "device", 2.0, "positive int or None"),
    ],
)
def test_topology_refuses(section, name, count, match):
    with pytest.raises(VerifyError, match=match):
        Topology(name, count)


# --- Mesh construction (seed §5) ----------------------------------------------------------------


def test_single_topology_normalises_to_one_element_tuple():
    topology = Topology("device", 8)
    mesh = Mesh(topology, Layout((2, 4), (4, 1)))
    assert mesh.topologies == (topology,)
    assert mesh.topology is mesh.topologies[0]


def test_topology_sequence_keeps_order_and_primary_is_first():
    warp, thread = Topology("warp", 4), Topology("thread", 32)
    mesh = Mesh([warp, thread], Layout((4, 32), (32, 1)), ("w", "t"))
    assert mesh.topologies == (warp, thread)
    assert mesh.topology is warp
    assert mesh.topology_domain() == 128


@pytest.mark.parametrize(
    ("section", "topologies", "layout", "names", "match"),
    [
        ("§5 raw string refused", "cta", Layout((8,)), None, r"raw string; build Topology\("),
        ("§5 raw string refused", "cta", Layout((8,)), None, "make_mesh"),
        ("§5 non-empty tuple", (), Layout((8,)), None, "non-empty tuple"),
        ("§5 every entry a Topology", ("cta",), Layout((8,)), None, "must be a Topology"),
        ("§5 layout is a Layout", Topology("d", 8), (8,), None, "layout must be a Layout"),
        (
            "§5 slice form is ComposedLayout(None, offset, Layout)",
            Topology("d", 8),
            ComposedLayout(Layout((8,), (1,)), 0, Layout((8,), (1,))),
            None,
            "layout must be a Layout",
        ),
        ("§5 one flat mode per axis", Topology("d", 8), Layout(((2, 2), 2)), None, "nested"),
        ("§5 positive extents", Topology("d", 8), Layout((0, 8)), None, "positive int"),
        ("§5 names match rank", Topology("d", 8), Layout((2, 4)), ("x",), "1 names"),
        ("§5 names distinct", Topology("d", 8), Layout((2, 4)), ("x", "x"), "repeat"),
        ("§5 names are identifiers", Topology("d", 8), Layout((2, 4)), ("x", "a-b"), "identifier"),
        ("§5 names are identifiers", Topology("d", 8), Layout((2, 4)), ("x", "for"), "identifier"),
        ("§5 names not shadowed", Topology("d", 8), Layout((2, 4)), ("x", "shape"), "shadowed"),
        ("§5 names not shadowed", Topology("d", 8), Layout((2, 4)), ("layout", "y"), "shadowed"),
        ("§5 names is a tuple", Topology("d", 8), Layout((2, 4)), "xy", "tuple of str"),
        (
            "§2 injective placement",
            Topology("d", 4),
            Layout((2, 4)),
            None,
            "8 coordinates but the topologies provide 4 devices",
        ),
    ],
)
def test_mesh_refuses(section, topologies, layout, names, match):
    with pytest.raises(VerifyError, match=match):
        Mesh(topologies, layout, names)


def test_mesh_admits_launch_provided_and_symbolic_extents():
    dynamic = Mesh(Topology("cta", None), Layout((None,), (1,)), ("c",))
    assert dynamic.shape == (None,)
    assert dynamic.topology_domain() is None
    symbolic = Mesh(Topology("device", 64), Layout((N,)), ("n",))
    assert symbolic.n.size is N


def test_shape_rank_axes():
    mesh = mesh_2x4()
    assert (mesh.shape, mesh.rank) == ((2, 4), 2)
    assert mesh.axes == (MeshAxis(mesh, 0, 2), MeshAxis(mesh, 1, 4))
    assert mesh.x == mesh.axes[0]
    assert (mesh.y.mesh, mesh.y.index, mesh.y.size, mesh.y.name) == (mesh, 1, 4, "y")


def test_unnamed_mesh_axes_have_no_name():
    mesh = make_mesh((2, 4))
    assert mesh.axes[1].name is None
    assert mesh.axes[1].label == "mesh axis 1"


def test_unknown_axis_is_a_verify_error_and_an_attribute_error():
    mesh = mesh_2x4()
    with pytest.raises(VerifyError, match="no axis named 'z'; this mesh has axes x, y"):
        _ = mesh.z
    assert not hasattr(mesh, "z")
    assert getattr(mesh, "z", None) is None


@pytest.mark.parametrize(
    ("section", "index", "size", "match"),
    [
        ("§5 index within rank", 2, 4, "not an axis"),
        ("§5 index is an int", "x", 2, "not an axis"),
        ("§5 size is the mesh extent", 0, 3, "differs from the extent 2 of mesh axis 0 \\('x'\\)"),
    ],
)
def test_mesh_axis_refuses_inconsistent_fields(section, index, size, match):
    with pytest.raises(VerifyError, match=match):
        MeshAxis(mesh_2x4(), index, size)


def test_topology_domain_is_the_product_or_none():
    assert mesh_2x4().topology_domain() == 8
    two_levels = Mesh((Topology("cta", None), Topology("thread", 32)), Layout((None, 32)))
    assert two_levels.topology_domain() is None


# --- values: immutable, hashable, value-equal, deterministic text -------------------------------


def test_meshes_are_values():
    assert mesh_2x4() == mesh_2x4()
    assert hash(mesh_2x4()) == hash(mesh_2x4())
    assert {mesh_2x4(): 1}[mesh_2x4()] == 1
    assert mesh_2x4() != make_mesh((2, 4), ("a", "b"))
    assert mesh_2x4() != make_mesh((2, 4))
    assert mesh_2x4() != make_mesh((2, 4), ("x", "y"), topology="cta")
    assert mesh_2x4().x == mesh_2x4().x and hash(mesh_2x4().x) == hash(mesh_2x4().x)


def test_meshes_are_immutable_constants():
    mesh = mesh_2x4()
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.names = ("a", "b")
    assert copy.copy(mesh) is mesh
    assert copy.deepcopy(mesh) is mesh


@pytest.mark.parametrize(
    ("mesh", "text"),
    [
        (make_mesh((2, 4), ("x", "y")), "Mesh(device[8]: x=2, y=4)"),
        (make_mesh(8), "Mesh(device[8]: 8)"),
        (
            Mesh((Topology("warp", 4), Topology("thread", 32)), Layout((4, 32), (32, 1))),
            "Mesh(warp[4]*thread[32]: 4, 32)",
        ),
        (
            Mesh(Topology("cta", None), Layout((None,), (1,)), ("c",)),
            "Mesh(cta[?]: c=None)",
        ),
        (
            Mesh(Topology("device", 8), Layout((2, 4)), ("x", "y")),
            "Mesh(device[8]: x=2, y=4; layout=Layout((2, 4), None))",
        ),
        (
            make_mesh((2, 4), ("x", "y"))[1],
            "Mesh(device[8]: y=4; layout=ComposedLayout(None, 4, Layout((4,), (1,))))",
        ),
    ],
)
def test_repr_is_compact_and_deterministic(mesh, text):
    assert repr(mesh) == text


# --- make_mesh (DESIGN §3) ----------------------------------------------------------------------


def test_make_mesh_builds_c_order_over_one_topology():
    mesh = make_mesh((2, 4, 32), ("x", "y", "t"))
    assert mesh.topologies == (Topology("device", 256),)
    assert mesh.layout == Layout((2, 4, 32), (128, 32, 1))
    assert mesh.names == ("x", "y", "t")


def test_make_mesh_options():
    assert make_mesh(8).shape == (8,)
    assert make_mesh([2, 2], ["a", "b"]).names == ("a", "b")
    assert make_mesh((4,), topology="warp").topology == Topology("warp", 4)
    assert make_mesh((4,), topology=Topology("warp", 8)).topology_domain() == 8


@pytest.mark.parametrize("shape", [(0, 2), (2, -1), (N, 2), (None,), (2.0,), (True, 2)])
def test_make_mesh_refuses_non_static_extents(shape):
    with pytest.raises(VerifyError, match="make_mesh: extents must be positive ints"):
        make_mesh(shape)


def test_c_order_strides():
    assert c_order_strides((2, 4, 3, 32, 4)) == (1536, 384, 128, 4, 1)
    assert c_order_strides(()) == ()
    assert c_order_strides((N, 4)) == (4, 1)
    assert c_order_strides((4, N)) == (N, 1)


# --- constant slicing m[...] (seed §5, tir §1.5) --------------------------------------------------


def devices(mesh: Mesh) -> list[int]:
    """Every device index of the mesh, in row-major coordinate order."""
    return [mesh.layout(*c) for c in itertools.product(*(range(e) for e in mesh.shape))]


@pytest.mark.parametrize(
    ("key", "shape", "names", "expected_devices"),
    [
        (1, (4,), ("y",), [4, 5, 6, 7]),
        (-1, (4,), ("y",), [4, 5, 6, 7]),
        ((slice(None), 2), (2,), ("x",), [2, 6]),
        ((slice(None), slice(1, None, 2)), (2, 2), ("x", "y"), [1, 3, 5, 7]),
        ((0, slice(1, 3)), (2,), ("y",), [1, 2]),
        ((slice(None), slice(None)), (2, 4), ("x", "y"), list(range(8))),
        ((1, 3), (), (), [7]),
    ],
)
def test_slice_records_the_sub_box(key, shape, names, expected_devices):
    mesh = mesh_2x4()[key]
    assert mesh.shape == shape
    assert mesh.names == names
    assert mesh.topologies == mesh_2x4().topologies
    assert isinstance(mesh.layout, ComposedLayout) and mesh.layout.inner is None
    assert devices(mesh) == expected_devices


def test_slice_of_a_slice_stays_one_flat_composition():
    mesh = make_mesh((2, 4, 4), ("x", "y", "z"))
    once = mesh[:, 1:, ::2]
    twice = once[1, 1:]
    assert twice.layout == ComposedLayout(None, 16 + 2 * 4, Layout((2, 2), (4, 2)))
    assert devices(twice) == [mesh.layout(1, 2 + i, 2 * j) for i in range(2) for j in range(2)]


def test_slices_are_values():
    assert mesh_2x4()[1] == mesh_2x4()[1]
    assert hash(mesh_2x4()[1]) == hash(mesh_2x4()[1])
    assert mesh_2x4()[1] != mesh_2x4()[0]


@pytest.mark.parametrize(
    ("section", "mesh", "key", "match"),
    [
        ("§5 index in range", mesh_2x4(), 2, r"index 2 is out of range for mesh axis 0 \('x'\)"),
        ("§5 index in range", mesh_2x4(), (0, -5), "out of range for mesh axis 1"),
        ("§5 at most rank indices", mesh_2x4(), (0, 0, 0), "3 indices for the rank-2 mesh"),
        ("§5 constant index", mesh_2x4(), "x", "must be a constant int or slice"),
        ("§5 constant index", mesh_2x4(), 1.0, "must be a constant int or slice"),
        ("§5 constant index", mesh_2x4(), Ellipsis, "must be a constant int or slice"),
        ("§5 constant bounds", mesh_2x4(), slice(0, N), "constant int bounds"),
        ("§5 positive step", mesh_2x4(), (slice(None), slice(None, None, -1)), "positive step"),
        ("§5 non-empty sub-box", mesh_2x4(), (slice(None), slice(3, 1)), "non-empty range"),
        (
            "§1 slicing needs static extents (None)",
            Mesh(Topology("cta", None), Layout((None,), (1,)), ("c",)),
            0,
            r"mesh axis 0 \('c'\) has extent None; slicing needs static int extents",
        ),
        (
            "§1 slicing needs static extents (symbolic)",
            Mesh(Topology("device", 128), Layout((2, N)), ("x", "n")),
            0,
            r"mesh axis 1 \('n'\) has extent N; slicing needs static int extents",
        ),
    ],
)
def test_slice_refuses(section, mesh, key, match):
    with pytest.raises(VerifyError, match=match):
        mesh[key]
