"""BroadcastTo: typeinfer case table (torch right-aligned rules, the shape attribute, storage,
layouts, Partials carried because broadcasting is linear), its relation, kernel and surface."""

from __future__ import annotations

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor.broadcast_to import BroadcastTo
from tilefoundry.ir.types import (
    DimVar,
    DType,
    bf16,
    f32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Partial, Split, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

X = make_mesh((4,), ("x",))
X1 = make_mesh((1,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
M = DimVar("M", 1, 64)
SUM, MAX, MIN = Partial("sum"), Partial("max"), Partial("min")


t = make_tensor_type  # the shorthand the case tables use


def sx(shape, *attrs, mesh=X):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def sxy(shape, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=XY, attrs=attrs)


def case(id_, shape, x, expected):
    return pytest.param(shape, x, expected, id=id_)


CASES = [
    # torch broadcast_to: right-aligned; a size-1 or absent axis grows, others must match
    case("prepend", (4, 8), t((8,)), t((4, 8))),
    case("grow-size-1", (4, 8), t((4, 1)), t((4, 8))),
    case("rank-0", (2, 3), t(()), t((2, 3))),
    case("identity", (4, 8), t((4, 8), bf16), t((4, 8), bf16)),
    case("to-empty", (0, 8), t((1, 8)), t((0, 8))),
    case("symbolic-target", (N, 8), t((1, 8)), t((N, 8))),
    case("symbolic-kept", (2, N), t((N,)), t((2, N))),
    case("list-shape", [3, 8], t((8,)), t((3, 8))),
    case("mismatch", (4, 8), t((3,)), r"^BroadcastTo: operand 'x' axis 0 has extent 3.*to 8"),
    case("shrink", (8,), t((4, 8)), r"^BroadcastTo: operand 'x' has rank 2.*never drops axes"),
    case("symbolic-mismatch", (M,), t((N,)), r"axis 0 has extent N, which cannot broadcast to M"),
    case("symbolic-vs-static", (8,), t((N,)), r"extent N, which cannot broadcast to 8"),
    # storage is the operand's
    case("rmem", (2, 4), t((4,), storage="rmem"), t((2, 4), storage="rmem")),
    # semantic-analysis §3.2: a Split on a surviving axis carries to its output axis
    case("split-prepend", (3, 8), sx((8,), Split(0)), sx((3, 8), Split(1))),
    case("split-kept-axis", (4, 8), sx((4, 1), Split(0)), sx((4, 8), Split(0))),
    case("replicated", (3, 8), sx((8,), B), t((3, 8))),
    # a size-1 axis that grows is read at the constant 0: a Split on it cannot carry
    case("split-grown-axis", (4, 8), sx((1, 8), Split(0), mesh=X1), r"^BroadcastTo: shard prop"),
    # broadcasting only replicates elements: linear and order-preserving, so Partials carry
    case("sum", (3, 8), sx((8,), SUM), sx((3, 8), SUM)),
    case("max", (3, 8), sx((8,), MAX), sx((3, 8), MAX)),
    case("min", (2, 8), sx((1, 8), MIN), sx((2, 8), MIN)),
    case("split-and-sum", (3, 8), sxy((8,), Split(0), SUM), sxy((3, 8), Split(1), SUM)),
    case("two-partials", (2, 4), sxy((4,), MAX, SUM), sxy((2, 4), MAX, SUM)),
]


@pytest.mark.parametrize(("shape", "x", "expected"), CASES)
def test_typeinfer(shape, x, expected):
    op = BroadcastTo(shape=shape)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


@pytest.mark.parametrize(
    ("shape", "match"),
    [
        ((4, -1), r"BroadcastTo: attribute 'shape': .*negative extent -1 at axis 1"),
        ((4, 2.5), r"BroadcastTo: attribute 'shape': shape entry: expected an int"),
        ((True,), r"BroadcastTo: attribute 'shape': shape entry: a bool"),
        (8, r"BroadcastTo: attribute 'shape': a shape is a tuple of dims, got 8"),
    ],
)
def test_shape_attribute_is_checked(shape, match):
    with pytest.raises(VerifyError, match=match):
        BroadcastTo(shape=shape)


def test_relation_reads_grown_axes_at_zero():
    relations = ACCESS_RELATION.lookup(BroadcastTo)(BroadcastTo(shape=(2, 4, 8)), (t((4, 1)),))
    (x,) = relations.inputs
    assert x.pattern.relation.is_equal(isl.Map("{ [d0, d1, d2] -> [d1, 0] }"))
    out = relations.outputs[0].pattern.relation
    assert out.is_equal(isl.Map("{ [d0, d1, d2] -> [d0, d1, d2] }"))


# ---------------------------------------------------------------------------------------------
# Reference kernel


def evaluate(shape, x):
    op = BroadcastTo(shape=shape)
    out_type = typeinfer_call(op, make_tensor_type(x.shape, DType.from_numpy(x.dtype)))
    return EVAL.lookup(BroadcastTo)(op, (x,), out_type)


def test_kernel_replicates_and_returns_a_writable_array():
    out = evaluate((3, 2), np.array([1, 2], np.int32))
    np.testing.assert_array_equal(out, [[1, 2], [1, 2], [1, 2]])
    assert out.flags.writeable
    out[0, 0] = 7  # a fresh array, not a view aliasing every row
    assert out[1, 0] == 1


def test_kernel_grows_size_one_axes_and_keeps_bf16():
    x = np.array([[0.1], [2.5]], ml_dtypes.bfloat16)
    out = evaluate((2, 3), x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out.astype(np.float32), np.repeat(x.astype(np.float32), 3, 1))


def test_kernel_to_empty():
    assert evaluate((0, 3), np.ones((1, 3), np.float32)).shape == (0, 3)


def test_surface_name():
    entry = surface_entry("broadcast_to")
    assert entry.op_class is BroadcastTo
    assert entry.fixed == {}
