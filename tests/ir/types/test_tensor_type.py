"""TensorType, TupleType, UnitType, CallableType and their constructors (spec-facts types §1-§8)."""

from __future__ import annotations

import pickle

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import (
    CallableType,
    DimVar,
    StorageKind,
    TensorType,
    TupleType,
    UnitType,
    bf16,
    f32,
    i32,
    i64,
    is_tensor_type,
    is_type,
    make_shard_tensor_type,
    make_tensor_type,
    numel,
    tensor_fields,
    with_dtype,
    with_layout,
    with_storage,
)
from tilefoundry.ir.types.shard import B, ComposedLayout, Layout, ShardLayout, Split, make_mesh

S = DimVar("S", 1, 9)
T = DimVar("T", 0, 5)


# ---- TensorType construction --------------------------------------------------------------------


def test_defaults_and_value_equality():
    t = TensorType((4, S), f32)
    assert t.layout is None and t.storage is StorageKind.GMEM
    assert t == make_tensor_type([4, S]) and hash(t) == hash(make_tensor_type((4, S)))
    assert t != make_tensor_type((4, S), storage="smem")
    assert pickle.loads(pickle.dumps(t)) == t


def test_shape_entries_are_normalised():
    # spec-facts types §4: every dim stored in a type goes through the one normal form.
    assert make_tensor_type(((S + 1) - 1, S - S + 3)).shape == (S, 3)
    assert make_tensor_type((S + 1,)) == make_tensor_type((1 + S,))


def test_rank_64_is_the_most_numpy_holds():
    assert TensorType((1,) * 64, f32).rank == 64


def test_scalar_is_rank_zero():
    # spec-facts types §2: a scalar is rank-0, shape ().
    t = make_tensor_type((), i64, "umat")
    assert t.shape == () and t.rank == 0 and numel(t) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"shape": (4, -1), "dtype": f32}, "negative extent at 1"),
        ({"shape": (4, True), "dtype": f32}, "bool is not a dimension"),
        ({"shape": (4, 2.0), "dtype": f32}, "expected an int, DimVar"),
        ({"shape": 4, "dtype": f32}, "shape must be a tuple"),
        ({"shape": (4,), "dtype": "f32"}, "dtype must be a DType"),
        ({"shape": (4,), "dtype": f32, "storage": "GMEM"}, "unknown storage"),
        ({"shape": (4,), "dtype": f32, "storage": None}, "storage must be a StorageKind"),
        ({"shape": (4,), "dtype": f32, "layout": "row-major"}, "layout must be a Layout"),
        # issue 28: "a rank-200 tensor is an internal error" (numpy holds at most 64 axes)
        ({"shape": (1,) * 65, "dtype": f32}, "rank 65 exceeds 64, the most numpy"),
    ],
)
def test_tensor_type_rejects(kwargs, message):
    with pytest.raises(VerifyError, match="TensorType") as info:
        TensorType(**kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((4, 8), Layout((4, 8), (8, 1))),
        ((4, 8), Layout((4, 8))),
        ((4, 8), Layout(((2, 2), 8), ((16, 8), 1))),
        ((4, S), Layout((4, S))),
        ((), Layout((), ())),
        ((4, 8), ComposedLayout(Layout((32,), (1,)), 0, Layout((4, 8), (8, 1)))),
    ],
)
def test_plain_layout_matching_shape_accepted(shape, layout):
    assert make_tensor_type(shape, layout=layout).layout == layout


@pytest.mark.parametrize(
    ("shape", "layout", "message"),
    [
        # spec-facts types §2: a plain Layout/ComposedLayout MUST match the rank and extents.
        ((4, 8), Layout((32,)), "has rank 1 but shape [4, 8] has rank 2"),
        ((4, 8), Layout((8, 4)), "extent 8 on axis 0"),
        ((4, S), Layout((4, T)), "extent T on axis 1"),
        ((4, 8), ComposedLayout(None, 0, Layout((4, 4))), "extent 4 on axis 1"),
        # spec-facts types §2: layouts must be injective.
        ((4, 8), Layout((4, 8), (0, 1)), "not injective"),
    ],
)
def test_plain_layout_mismatch_refused(shape, layout, message):
    with pytest.raises(VerifyError, match="TensorType") as info:
        make_tensor_type(shape, layout=layout)
    assert message in str(info.value)


MESH = make_mesh((4,))


def test_shard_layout_size_parity():
    # DESIGN §4.3: size(G) == size(T.shape) is checked when the ShardLayout enters a TensorType;
    # G itself may factor the logical shape.
    layout = ShardLayout(Layout((4, 4, 8), (32, 8, 1)), (Split(0),), MESH)
    assert make_tensor_type((16, 8), layout=layout).layout is layout
    with pytest.raises(VerifyError, match=r"ShardLayout size 128 .* tensor size 64"):
        make_tensor_type((16, 4), layout=layout)


def test_shard_layout_symbolic_size_not_checked():
    layout = ShardLayout(Layout((S, 8)), (Split(0),), MESH)
    assert make_tensor_type((S, 8), layout=layout).layout is layout


# ---- make_shard_tensor_type ---------------------------------------------------------------------


def test_make_shard_tensor_type_canonical_layout():
    # spec-facts types §8 example: canonical((16,8), mesh(4,), (Split(0),)) = (4,4,8):(32,8,1).
    t = make_shard_tensor_type((16, 8), mesh=MESH, attrs=(Split(0),))
    assert t.shape == (16, 8)
    assert t.layout == ShardLayout(Layout((4, 4, 8), (32, 8, 1)), (Split(0),), MESH)


def test_make_shard_tensor_type_split_names_logical_axis():
    # DESIGN §3: here Split(i) names logical axis i; the layout's Splits are renumbered positions.
    mesh = make_mesh((2, 2), names=("x", "y"))
    t = make_shard_tensor_type((16, 8), bf16, "smem", mesh=mesh, attrs=(Split(1), Split(0)))
    assert t.layout.shape == (2, 8, 2, 4)
    assert t.layout.attrs == (Split(2), Split(0))
    assert (t.dtype, t.storage) == (bf16, StorageKind.SMEM)


@pytest.mark.parametrize(("mesh", "attrs"), [(None, (Split(0),)), (MESH, ())])
def test_make_shard_tensor_type_plain_without_mesh_or_attrs(mesh, attrs):
    assert make_shard_tensor_type((16, 8), mesh=mesh, attrs=attrs) == make_tensor_type((16, 8))


def test_make_shard_tensor_type_broadcast_keeps_shape():
    t = make_shard_tensor_type((16, 8), mesh=MESH, attrs=(B,))
    assert t.layout.shape == (16, 8)


def test_make_shard_tensor_type_indivisible_refused():
    with pytest.raises(VerifyError, match="not divisible"):
        make_shard_tensor_type((15, 8), mesh=MESH, attrs=(Split(0),))


# ---- Tuple / Unit / Callable --------------------------------------------------------------------

A = make_tensor_type((4, S))
I = make_tensor_type((4,), i32)


def test_tuple_type_and_leaves():
    nested = TupleType([A, TupleType((I, A))])
    assert nested.fields == (A, TupleType((I, A)))
    assert tensor_fields(nested) == (A, I, A)
    assert tensor_fields(A) == (A,)
    assert tensor_fields(UnitType()) == ()


@pytest.mark.parametrize("bad", [(UnitType(),), (4,), ("f32[4]",), A])
def test_tuple_type_rejects_non_tensor_fields(bad):
    expected = "field 0 must be a TensorType or TupleType|fields must be a tuple of types"
    with pytest.raises(VerifyError, match=f"TupleType: ({expected})"):
        TupleType(bad)


def test_callable_type():
    c = CallableType([A, TupleType((I,))], A)
    assert c.params == (A, TupleType((I,))) and c.return_type == A
    assert c == CallableType((A, TupleType((I,))), A)
    assert CallableType((), UnitType()).return_type == UnitType()


@pytest.mark.parametrize(
    ("params", "ret", "message"),
    [((A, "x"), A, "parameter 1"), ((A,), None, "return_type"), (A, A, "params must be a tuple")],
)
def test_callable_type_rejects(params, ret, message):
    with pytest.raises(VerifyError, match=message):
        CallableType(params, ret)


def test_type_predicates():
    assert is_tensor_type(A) and not is_tensor_type(TupleType((A,)))
    assert all(is_type(t) for t in (A, TupleType(()), UnitType(), CallableType((), A)))
    assert not is_type(f32)


# ---- helpers ------------------------------------------------------------------------------------


def test_with_helpers_revalidate():
    assert with_dtype(A, i32).dtype is i32
    assert with_storage(A, "rmem").storage is StorageKind.RMEM
    laid = with_layout(make_tensor_type((4, 8)), Layout((4, 8), (8, 1)))
    assert laid.layout == Layout((4, 8), (8, 1))
    assert with_layout(laid, None).layout is None
    with pytest.raises(VerifyError, match=r"has extent 8 on axis 0 but shape \[4, 8\] has 4"):
        with_layout(make_tensor_type((4, 8)), Layout((8, 4)))
    with pytest.raises(VerifyError, match="with_dtype: expected a TensorType"):
        with_dtype(TupleType((A,)), i32)


@pytest.mark.parametrize(
    ("type_", "count"),
    [
        (make_tensor_type((4, 8)), 32),
        (make_tensor_type((0, 8)), 0),
        (TupleType((make_tensor_type((2, 3)), make_tensor_type((5,), i64))), 11),
        (UnitType(), 0),
    ],
)
def test_numel(type_, count):
    assert numel(type_) == count


def test_numel_rejects_symbolic_and_callable():
    with pytest.raises(VerifyError, match="symbolic extent S"):
        numel(A)
    with pytest.raises(VerifyError, match=r"tensor_fields: .* is not a tensor, tuple or unit type"):
        numel(CallableType((), A))


@pytest.mark.parametrize(
    ("type_", "text"),
    [
        (make_tensor_type((4, S)), "f32[4, S] gmem"),
        (make_tensor_type((2, 1536), storage="gmem"), "f32[2, 1536] gmem"),
        (make_tensor_type((), i64, "umat"), "i64[] umat"),
        (make_tensor_type(((S + 1) // 4,), bf16, "smem"), "bf16[(S+1)//4] smem"),
        (
            make_tensor_type((4, 8), layout=Layout((4, 8), (8, 1))),
            "f32[4, 8] gmem layout=(4,8):(8,1)",
        ),
        (TupleType((I, I)), "(i32[4] gmem, i32[4] gmem)"),
        (UnitType(), "unit"),
        (CallableType((I,), UnitType()), "(i32[4] gmem) -> unit"),
    ],
)
def test_compact_str(type_, text):
    assert str(type_) == text
