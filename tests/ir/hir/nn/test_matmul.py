"""MatMul: typeinfer case tables (shapes, dtypes, storage, sharding, Partials) and the kernel."""

from __future__ import annotations

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    bool_,
    f16,
    f32,
    fp8e4m3,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Partial, Split, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
B = DimVar("B", 1, 64)
K = DimVar("K", 1, 4096)
B_ = Broadcast()
PSUM = Partial("sum")


t = make_tensor_type  # the shorthand the case tables use


def s(shape, *attrs, mesh=None):
    mesh = mesh or (M1 if len(attrs) == 1 else M2)
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def check(args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(MatMul(), *args)
    else:
        assert typeinfer_call(MatMul(), *args) == expected


SHAPES = [
    # torch matmul: matrices, batches, broadcasting and 1-D promotion
    ((t((3, 8)), t((8, 5))), t((3, 5))),
    ((t((2, 3, 8)), t((2, 8, 5))), t((2, 3, 5))),
    ((t((2, 1, 3, 8)), t((5, 8, 4))), t((2, 5, 3, 4))),
    ((t((3, 8)), t((7, 8, 5))), t((7, 3, 5))),
    ((t((B, 3, K)), t((K, 5))), t((B, 3, 5))),
    ((t((8,)), t((8,))), t(())),  # dot product
    ((t((8,)), t((8, 5))), t((5,))),  # the promoted row axis is dropped
    ((t((8,)), t((2, 8, 5))), t((2, 5))),
    ((t((3, 8)), t((8,))), t((3,))),  # the promoted column axis is dropped
    ((t((2, 3, 8)), t((8,))), t((2, 3))),
    ((t((3, 0)), t((0, 5))), t((3, 5))),
    ((t((3, 8), i32), t((8, 5), i32)), t((3, 5), i32)),
    ((t((3, 8), bf16), t((8, 5), bf16)), t((3, 5), bf16)),
    # refusals
    ((t((3, 8)), t((7, 5))), r"^MatMul: contraction extents differ: lhs \[3, 8\] has K=8"),
    ((t((8,)), t((7,))), "contraction extents differ"),
    ((t((2, 3, 8)), t((3, 8, 5))), r"^MatMul: batch dims \[2\] and \[3\] do not broadcast"),
    ((t(()), t((8,))), "operand 'lhs' must have rank >= 1"),
    ((t((3, 8)), t((8, 5), bf16)), r"operand 'rhs' is bf16 but 'lhs' is f32.*cast"),
    ((t((3, 8), bool_), t((8, 5), bool_)), "must be numeric"),
]


@pytest.mark.parametrize("args, expected", SHAPES)
def test_shapes_and_dtypes(args, expected):
    check(args, expected)


# semantic-analysis §3.3: output storage anchors on the concrete operand storages.
@pytest.mark.parametrize(
    "lhs, rhs, expected",
    [
        ("smem", "smem", "smem"),
        ("smem", "umat", "smem"),
        ("umat", "umat", "umat"),
        ("gmem", "smem", "different storages"),
    ],
)
def test_storage_anchoring(lhs, rhs, expected):
    out = expected if expected.endswith("storages") else t((3, 5), f32, expected)
    check((t((3, 8), f32, lhs), t((8, 5), f32, rhs)), out)


SHARDING = [
    # M, N and batch splits carry (semantic-analysis §3.2 rule 2; hand-written canonical layouts)
    ((s((8, 16), Split(0)), t((16, 12))), s((8, 12), Split(0))),
    ((t((8, 16)), s((16, 12), Split(1))), s((8, 12), Split(1))),
    ((s((4, 3, 16), Split(0)), t((16, 5))), s((4, 3, 5), Split(0))),
    ((s((4, 3, 16), Split(0)), t((16,))), s((4, 3), Split(0))),
    (
        (s((8, 16), Split(0), B_, mesh=M2), s((16, 12), B_, Split(1))),
        s((8, 12), Split(0), Split(1)),
    ),
    # K is a partial reduction: a K split leaves Partial(sum) (rule 3). Both operands split on
    # one mesh axis, or one operand split and the other replicated (sliced locally, DESIGN §4.12).
    ((s((8, 16), Split(1)), s((16, 12), Split(0))), s((8, 12), PSUM)),
    ((s((8, 16), Split(1)), t((16, 12))), s((8, 12), PSUM)),
    ((t((8, 16)), s((16, 12), Split(0))), s((8, 12), PSUM)),
    ((s((16,), Split(0)), t((16, 12))), s((12,), PSUM)),
    ((s((16,), Split(0)), s((16,), Split(0))), s((), PSUM)),
    ((s((8, 16), Split(0), Split(1)), t((16, 12))), s((8, 12), Split(0), PSUM)),
    # rule 6: one mesh axis cannot partition two domain dims
    ((s((8, 16), Split(0)), s((16, 12), Split(1))), r"^MatMul: shard propagation.*rule 6"),
]


@pytest.mark.parametrize("args, expected", SHARDING)
def test_sharding(args, expected):
    check(args, expected)


# hir §1.3 nn: "MatMul is linear in one value input when the other value-carrying input is
# Broadcast / replicated. On each mesh axis, one Partial(sum) is therefore allowed; a double-Partial
# input or a non-sum reduction is rejected."
PARTIALS = [
    ((s((8, 16), PSUM), t((16, 12))), s((8, 12), PSUM)),
    ((t((8, 16)), s((16, 12), PSUM)), s((8, 12), PSUM)),
    ((s((8, 16), PSUM), s((16, 12), B_)), s((8, 12), PSUM)),
    ((s((8, 16), PSUM, B_), s((16, 12), B_, Split(1))), s((8, 12), PSUM, Split(1))),
    ((s((8, 16), Split(0), PSUM), t((16, 12))), s((8, 12), Split(0), PSUM)),
    # per mesh axis: lhs pending on x, rhs pending on y, each facing a replicated operand
    ((s((8, 16), PSUM, B_), s((16, 12), B_, PSUM)), s((8, 12), PSUM, PSUM)),
    (
        (s((8, 16), PSUM), s((16, 12), PSUM)),
        r"^MatMul: operands 'lhs' and 'rhs' both carry Partial\(sum\) on mesh axis 0 \('x'\).*"
        r"reshard",
    ),
    (
        (s((8, 16), B_, PSUM), s((16, 12), B_, PSUM)),
        r"both carry Partial\(sum\) on mesh axis 1 \('y'\)",
    ),
    (
        (s((8, 16), Partial("max")), t((16, 12))),
        r"^MatMul: operand 'lhs' carries Partial\(max\) on mesh axis 0 \('x'\).*sum only.*reshard",
    ),
    ((t((8, 16)), s((16, 12), B_, Partial("min"))), r"operand 'rhs' carries Partial\(min\)"),
    (
        (s((8, 16), PSUM), s((16, 12), Split(1))),
        r"^MatMul: operand 'lhs' carries Partial\(sum\) on mesh axis 0 \('x'\) while 'rhs' is "
        r"Split on it.*reshard\(lhs",
    ),
    ((s((8, 16), Split(1)), s((16, 12), PSUM)), r"operand 'rhs' carries Partial\(sum\).*'lhs'"),
]


@pytest.mark.parametrize("args, expected", PARTIALS)
def test_partials(args, expected):
    check(args, expected)


@pytest.mark.parametrize(
    "lhs, rhs, maps",
    [
        ((2, 3, 8), (8, 5), ("[d0, d1, d3]", "[d3, d2]", "[d0, d1, d2]")),
        ((8,), (2, 8, 5), ("[d2]", "[d0, d2, d1]", "[d0, d1]")),
        ((2, 3, 8), (8,), ("[d0, d1, d2]", "[d2]", "[d0, d1]")),
        ((8,), (8,), ("[d0]", "[d0]", "[]")),
    ],
)
def test_relation_iterates_batch_m_n_then_k(lhs, rhs, maps):
    rel = ACCESS_RELATION.lookup(MatMul)(MatMul(), (t(lhs), t(rhs)))
    dims = ", ".join(f"d{i}" for i in range(rel.domain_rank))
    got = [b.pattern.relation for b in rel.inputs + rel.outputs]
    for relation, image in zip(got, maps, strict=True):
        assert relation.is_equal(isl.Map(f"{{ [{dims}] -> {image} }}"))


def test_surface_name():
    assert surface_entry("matmul").op_class is MatMul


# ------------------------------------------------------------------------------------------------
# Reference kernel against literal values and explicit loops.


def run(lhs, rhs, dtype=f32):
    out_type = typeinfer_call(MatMul(), t(lhs.shape, dtype), t(rhs.shape, dtype))
    return EVAL.lookup(MatMul)(MatMul(), (lhs, rhs), out_type)


def test_kernel_literal_values():
    lhs = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    rhs = np.array([[5.0, 6.0], [7.0, 8.0]], np.float32)
    np.testing.assert_array_equal(run(lhs, rhs), [[19.0, 22.0], [43.0, 50.0]])
    np.testing.assert_array_equal(run(lhs[0], rhs), [19.0, 22.0])
    np.testing.assert_array_equal(run(lhs, rhs[:, 0]), [19.0, 43.0])
    dot = run(lhs[0], rhs[:, 0])
    assert dot.shape == () and dot == 19.0


def test_kernel_batch_broadcast_against_loops():
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    rhs = rng.standard_normal((5, 4, 2)).astype(np.float32)
    expected = np.zeros((2, 5, 3, 2))
    for a in range(2):
        for b in range(5):
            for i in range(3):
                for j in range(2):
                    expected[a, b, i, j] = sum(lhs[a, 0, i, k] * rhs[b, k, j] for k in range(4))
    np.testing.assert_allclose(run(lhs, rhs), expected, rtol=1e-5, atol=1e-6)


def test_kernel_empty_contraction_and_integers():
    np.testing.assert_array_equal(
        run(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32)), np.zeros((2, 3))
    )
    got = run(np.array([[2, -3]], np.int32), np.array([[4], [5]], np.int32), i32)
    assert got.dtype == np.int32 and got.tolist() == [[-7]]


@pytest.mark.parametrize(
    "narrow, dtype", [(ml_dtypes.bfloat16, bf16), (ml_dtypes.float8_e4m3fn, fp8e4m3), (None, f16)]
)
def test_kernel_narrow_floats_accumulate_wide_and_round_once(narrow, dtype):
    narrow = narrow or np.float16
    lhs = np.array([[1.5, -0.75, 3.0, 0.125]], narrow)
    rhs = np.array([[2.0], [1.25], [-0.5], [6.0]], narrow)
    exact = sum(float(a) * float(b) for a, b in zip(lhs[0], rhs[:, 0], strict=True))
    got = run(lhs, rhs, dtype)
    assert got.dtype == narrow
    assert float(got[0, 0]) == float(np.array(exact).astype(narrow))
