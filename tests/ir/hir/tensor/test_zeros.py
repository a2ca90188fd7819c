"""Zeros: typeinfer case table over its attributes (shape, dtype, storage, layout), its
operand-free relation, reference kernel, per-device shares and surface name."""

from __future__ import annotations

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.evaluator.single_op import run_op
from tilefoundry.ir.hir.tensor.zeros import Zeros
from tilefoundry.ir.types import (
    DimVar,
    StorageKind,
    bf16,
    bool_,
    f4e2m1,
    f32,
    fp8e4m3,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Dynamic, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

N = DimVar("N", 1, 64)
DP = make_mesh((4,), ("dp",))
GRID = make_mesh((2, 2), ("a", "b"))


def placed(shape, attrs, mesh=DP):
    """The canonical type of `shape` in `attrs` (Split(i) naming logical axis i)."""
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        # hir §1.3 Zeros: the result is a plain tensor of the attributes' shape, dtype, storage
        (dict(shape=(2, 3), dtype=f32), make_tensor_type((2, 3), f32, "gmem")),
        (dict(shape=[4], dtype="bf16"), make_tensor_type((4,), bf16, "gmem")),
        (dict(shape=(), dtype=i32), make_tensor_type((), i32, "gmem")),
        (dict(shape=(0, 5), dtype=bool_), make_tensor_type((0, 5), bool_, "gmem")),
        (dict(shape=(N, 8), dtype=fp8e4m3), make_tensor_type((N, 8), fp8e4m3, "gmem")),
        (dict(shape=(8,), dtype=f32, storage="rmem"), make_tensor_type((8,), f32, "rmem")),
        (
            dict(shape=(8,), dtype=f32, storage=StorageKind.SMEM),
            make_tensor_type((8,), f32, "smem"),
        ),
        (dict(shape=(8,), dtype=f4e2m1), make_tensor_type((8,), f4e2m1, "gmem")),
    ],
)
def test_typeinfer(attrs, expected):
    assert typeinfer_call(Zeros(**attrs)) == expected


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        (dict(shape=(2, -3), dtype=f32), r"Zeros: attribute 'shape': .*negative extent -3"),
        (dict(shape=(2, "n"), dtype=f32), r"Zeros: attribute 'shape': shape entry: expected an"),
        (dict(shape=(2,), dtype="float32"), r"Zeros: attribute 'dtype': .*unknown dtype name"),
        # f8e8m0 is exponent-only: it has no zero to initialise with
        (dict(shape=(2,), dtype="f8e8m0"), r"Zeros: attribute 'dtype': f8e8m0 .* no zero"),
        # storage names are exact lowercase (types §2), no case-folding
        (dict(shape=(2,), dtype=f32, storage="GMEM"), r"Zeros: attribute 'storage': .*'GMEM'"),
        (dict(shape=(2,), dtype=f32, storage=None), r"Zeros: attribute 'storage': .*required"),
        (dict(shape=(2,)), r"Zeros: missing required attribute 'dtype'"),
    ],
)
def test_attribute_refusals(attrs, match):
    with pytest.raises(VerifyError, match=match):
        Zeros(**attrs)


@pytest.mark.parametrize(
    ("shape", "attrs", "mesh"),
    [
        # issue 26: zeros are a valid pending value of every reduction (each addend zero)
        ((8, 4), (P("sum"),), DP),
        ((8, 4), (P("max"),), DP),
        ((8, 4), (P("min"),), DP),
        ((8, 4), (B,), DP),
        ((8, 4), (S(0),), DP),
        ((8, 4), (S(1),), DP),
        ((8, 4), (P("sum"), S(1)), GRID),
        ((8, 4), (S(0), P("sum")), GRID),
        ((), (P("sum"),), DP),
    ],
)
def test_typeinfer_with_a_layout_gives_exactly_that_layout(shape, attrs, mesh):
    want = placed(shape, attrs, mesh)
    assert typeinfer_call(Zeros(shape=shape, dtype=f32, layout=want.layout)) == want


def test_a_layout_without_strides_gets_c_order_over_the_global_shape():
    """Reshard's same-storage default for a sugar target (shard §7.5)."""
    sugar = ShardLayout(Layout((8, 4)), (P("sum"),), DP)
    got = typeinfer_call(Zeros(shape=(8, 4), dtype=f32, layout=sugar))
    assert got.layout.layout.stride == (4, 1)
    assert got.layout.attrs == (P("sum"),)


@pytest.mark.parametrize(
    ("layout", "match"),
    [
        (
            placed((4, 4), (P("sum"),)).layout,
            r"Zeros: the layout .* has size 16 but the shape \[8, 4\] has size 32",
        ),
        (
            ShardLayout(Layout((8, 4)), (Dynamic(),), DP),
            r"Zeros: the layout is Dynamic on mesh axis 0 \('dp'\).* name Split\(k\)",
        ),
    ],
)
def test_layout_refusals(layout, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(Zeros(shape=(8, 4), dtype=f32, layout=layout))


def test_default_storage_is_gmem():
    assert Zeros(shape=(2,), dtype=f32).storage is StorageKind.GMEM


def test_relation_has_no_inputs_and_one_identity_output():
    relations = ACCESS_RELATION.lookup(Zeros)(Zeros(shape=(2, 3), dtype=f32), ())
    assert relations.inputs == ()
    (out,) = relations.outputs
    assert out.pattern.relation.is_equal(isl.Map("{ [d0, d1] -> [d0, d1] }"))


# ---------------------------------------------------------------------------------------------
# Reference kernel


def evaluate(**attrs):
    op = Zeros(**attrs)
    return EVAL.lookup(Zeros)(op, (), typeinfer_call(op))


@pytest.mark.parametrize(
    ("dtype", "numpy_dtype"),
    [(f32, np.float32), (bf16, ml_dtypes.bfloat16), (i32, np.int32), (bool_, np.bool_)],
)
def test_kernel_is_zero_filled(dtype, numpy_dtype):
    out = evaluate(shape=(2, 3), dtype=dtype)
    assert out.dtype == np.dtype(numpy_dtype)
    assert out.shape == (2, 3)
    assert not out.astype(np.float32).any()


def test_kernel_empty_and_rank_0():
    assert evaluate(shape=(0, 4), dtype=f32).shape == (0, 4)
    assert evaluate(shape=(), dtype=i32).tolist() == 0


def test_kernel_refuses_an_unresolved_shape():
    with pytest.raises(EvalError, match=r"Zeros: shape \[N, 8\] is symbolic"):
        evaluate(shape=(N, 8), dtype=f32)


def test_surface_name():
    entry = surface_entry("zeros")
    assert entry.op_class is Zeros
    assert entry.fixed == {}


@pytest.mark.parametrize(
    ("attrs", "block"),
    [((P("sum"),), (8, 4)), ((S(0),), (2, 4)), ((S(1),), (8, 1))],
)
def test_each_device_holds_zeros_of_its_share(attrs, block):
    """DESIGN §4.12: a Split device holds its block, a Partial device an addend (a Broadcast
    value is one replicated global value)."""
    type_ = placed((8, 4), attrs)
    value = run_op(Zeros(shape=(8, 4), dtype=f32, layout=type_.layout), (), type_, ())
    assert len(value.shards) == 4
    for shard in value.shards.values():
        assert shard.shape == block and shard.dtype == np.float32 and not shard.any()
