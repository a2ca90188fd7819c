"""RoPE: typeinfer case tables (shape contract, layouts, per-branch Partials) and the kernel."""

from __future__ import annotations

import math

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.nn.rope import RoPE
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Layout, Partial, Split, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
S = DimVar("S", 1, 4096)
B_ = Broadcast()
PSUM = Partial("sum")

Q = (2, 8, 16, 64)
K = (2, 4, 16, 64)
CACHE = (128, 64)


t = make_tensor_type  # the shorthand the case tables use


def s(shape, *attrs, dtype=f32):
    mesh = M1 if len(attrs) == 1 else M2
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


POS = t((16,), i32)


def check(args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(RoPE(), *args)
    else:
        assert typeinfer_call(RoPE(), *args) == expected


def pair(q, k):
    return TupleType((q, k))


STRIDED = make_tensor_type((4, 8), f32, layout=Layout((4, 8), (1, 4)))

SHAPES = [
    # the result is (q_rope, k_rope); each branch keeps its input's type
    ((t(Q), t(K), t(CACHE), t(CACHE), POS), pair(t(Q), t(K))),
    (
        (t((16, 64)), t((3, 16, 64)), t(CACHE), t(CACHE), t((16,), i64)),
        pair(t((16, 64)), t((3, 16, 64))),
    ),
    ((t((S, 64)), t((S, 64)), t(CACHE), t(CACHE), t((S,), i32)), pair(t((S, 64)), t((S, 64)))),
    ((STRIDED, STRIDED, t((9, 8)), t((9, 8)), t((4,), i32)), pair(STRIDED, STRIDED)),
    (
        (t(Q, bf16), t(K, bf16), t(CACHE, bf16), t(CACHE, bf16), t((16,), i32, "umat")),
        pair(t(Q, bf16), t(K, bf16)),
    ),
    # the shape contract
    (
        (t((64,)), t(K), t(CACHE), t(CACHE), POS),
        r"^RoPE: operand 'q' must be \[.., seq, head_dim\]",
    ),
    ((t((16, 63)), t((16, 63)), t((9, 63)), t((9, 63)), POS), "head_dim must be static and even"),
    ((t(Q), t((2, 4, 8, 64)), t(CACHE), t(CACHE), POS), r"'k' must share q's \[seq, head_dim\]"),
    ((t(Q), t(K), t((128, 32)), t(CACHE), POS), r"operand 'cos_cache' must be \[max_pos, 64\]"),
    ((t(Q), t(K), t(CACHE), t((64, 64)), POS), "cos_cache .* and sin_cache differ"),
    ((t(Q), t(K), t(CACHE), t(CACHE), t((2, 16), i32)), r"'pos_ids' must be an integer \[16\]"),
    ((t(Q), t(K), t(CACHE), t(CACHE), t((16,))), r"'pos_ids' must be an integer"),
    ((t(Q), t(K, bf16), t(CACHE), t(CACHE), POS), r"operand 'k' is bf16 but 'q' is f32"),
    ((t(Q, i32), t(K, i32), t(CACHE, i32), t(CACHE, i32), POS), "must be float tensors"),
    ((t(Q, f32, "smem"), t(K), t(CACHE), t(CACHE), POS), "different storages"),
]


@pytest.mark.parametrize("args, expected", SHAPES)
def test_shapes(args, expected):
    check(args, expected)


SHARDING = [
    # hir §1.3 RoPE: "each branch preserves the layout of its corresponding q or k input"
    ((s(Q, Split(1)), t(K), t(CACHE), t(CACHE), POS), pair(s(Q, Split(1)), t(K))),
    ((s(Q, Split(0), B_), s(K, B_, Split(1)), t(CACHE), t(CACHE), POS), None),
    # sequence parallel: pos_ids split like both branches' seq axis, or replicated
    (
        (s(Q, Split(2)), s(K, Split(2)), t(CACHE), t(CACHE), s((16,), Split(0), dtype=i32)),
        pair(s(Q, Split(2)), s(K, Split(2))),
    ),
    ((s(Q, Split(2)), t(K), t(CACHE), t(CACHE), POS), pair(s(Q, Split(2)), t(K))),
    # a pos_ids split that a branch does not share would change that branch's layout
    (
        (s(Q, Split(2)), t(K), t(CACHE), t(CACHE), s((16,), Split(0), dtype=i32)),
        r"^RoPE: operand 'pos_ids' is Split on mesh axis 0 \('x'\) but 'k' does not split its "
        r"seq axis there.*reshard\(pos_ids",
    ),
    # head_dim halves rotate into each other: a head_dim split fails closed
    (
        (s(Q, Split(3)), t(K), t(CACHE), t(CACHE), POS),
        r"^RoPE: operand 'q' is Split on mesh axis 0 \('x'\) along axis 3.*head_dim.*reshard\(q",
    ),
    ((t(Q), s(K, B_, Split(3)), t(CACHE), t(CACHE), POS), r"'k' is Split on mesh axis 1 \('y'\)"),
    # the caches are gathered whole at data-dependent rows: any cache split fails closed
    ((t(Q), t(K), s(CACHE, Split(0)), t(CACHE), POS), r"'cos_cache' is Split on mesh axis 0"),
    ((t(Q), t(K), t(CACHE), s(CACHE, B_, Split(1)), POS), r"'sin_cache' is Split .* axis 1"),
]


@pytest.mark.parametrize("args, expected", SHARDING)
def test_sharding(args, expected):
    check(args, expected if expected is not None else pair(args[0], args[1]))


# hir §1.3 RoPE: "On each mesh axis, a branch MAY preserve one Partial(sum) on its corresponding
# query or key input only when cos_cache, sin_cache, and pos_ids are Broadcast / replicated on
# that axis. A non-sum Partial, multiple value-carrying Partials, or a Partial on a secondary
# cache/index input MUST be rejected with a Reshard remedy."
PARTIALS = [
    ((s(Q, PSUM), t(K), t(CACHE), t(CACHE), POS), pair(s(Q, PSUM), t(K))),
    ((t(Q), s(K, B_, PSUM), s(CACHE, B_, B_), t(CACHE), POS), pair(t(Q), s(K, B_, PSUM))),
    ((s(Q, Split(2), PSUM), t(K), t(CACHE), t(CACHE), POS), None),
    (
        (s(Q, PSUM), s(K, PSUM), t(CACHE), t(CACHE), POS),
        r"^RoPE: 'q' and 'k' both carry a Partial\(sum\) \(k on mesh axis 0 \('x'\)\).*multiple "
        r"value-carrying Partials.*reshard\(k",
    ),
    # read conservatively: on different mesh axes too
    (
        (s(Q, PSUM, B_), s(K, B_, PSUM), t(CACHE), t(CACHE), POS),
        r"both carry a Partial\(sum\) \(k on mesh axis 1 \('y'\)\)",
    ),
    (
        (s(Q, Partial("max")), t(K), t(CACHE), t(CACHE), POS),
        r"^RoPE: operand 'q' carries Partial\(max\) on mesh axis 0 \('x'\).*sum only.*reshard\(q",
    ),
    ((t(Q), s(K, B_, Partial("min")), t(CACHE), t(CACHE), POS), r"'k' carries Partial\(min\)"),
    (
        (s(Q, PSUM), t(K), s(CACHE, PSUM), t(CACHE), POS),
        r"^RoPE: operand 'cos_cache' carries Partial\(sum\).*reshard\(cos_cache",
    ),
    ((t(Q), t(K), t(CACHE), s(CACHE, B_, PSUM), POS), r"operand 'sin_cache' carries Partial"),
    ((t(Q), t(K), t(CACHE), t(CACHE), s((16,), PSUM, dtype=i32)), "'pos_ids' carries Partial"),
    (
        (s(Q, PSUM), s(K, Split(2)), t(CACHE), t(CACHE), s((16,), Split(0), dtype=i32)),
        r"^RoPE: 'q' carries Partial\(sum\) on mesh axis 0 \('x'\) while 'pos_ids' is Split",
    ),
]


@pytest.mark.parametrize("args, expected", PARTIALS)
def test_partials(args, expected):
    check(args, expected if expected is not None else pair(args[0], args[1]))


def test_relation_keeps_head_dim_and_caches_whole():
    rel = ACCESS_RELATION.lookup(RoPE)(RoPE(), (t(Q), t(K[1:]), t(CACHE), t(CACHE), POS))
    # domain: q's [batch, heads], k's [heads], then the shared seq
    domain = "[d0, d1, d2, d3]"
    expected_inputs = ["[d0, d1, d3, w]", "[d2, d3, w]", "[w0, w1]", "[w0, w1]", "[d3]"]
    expected_outputs = ["[d0, d1, d3, w]", "[d2, d3, w]"]
    got = rel.inputs + rel.outputs
    for boundary, image in zip(got, expected_inputs + expected_outputs, strict=True):
        assert boundary.pattern.relation.is_equal(isl.Map(f"{{ {domain} -> {image} }}"))


def test_surface_name():
    assert surface_entry("rope").op_class is RoPE


# ------------------------------------------------------------------------------------------------
# Reference kernel against the pairwise rotation written out with math.cos / math.sin.


def rotate_loops(x, cos_cache, sin_cache, pos_ids):
    """x[..., s, i] and x[..., s, i + d/2] rotate together by the angle at pos_ids[s]."""
    out = np.zeros(x.shape)
    half = x.shape[-1] // 2
    for index in np.ndindex(*x.shape[:-1]):
        p, row = pos_ids[index[-1]], x[index]
        for i in range(half):
            a, b = float(row[i]), float(row[i + half])
            out[index][i] = a * float(cos_cache[p, i]) - b * float(sin_cache[p, i])
            out[index][i + half] = b * float(cos_cache[p, i + half]) + a * float(
                sin_cache[p, i + half]
            )
    return out


def caches(max_pos, head_dim):
    """HF-style caches: the angle table repeated over both halves."""
    angles = [
        [p * 10000 ** (-2 * (i % (head_dim // 2)) / head_dim) for i in range(head_dim)]
        for p in range(max_pos)
    ]
    cos = [[math.cos(a) for a in row] for row in angles]
    sin = [[math.sin(a) for a in row] for row in angles]
    return np.array(cos, np.float32), np.array(sin, np.float32)


def run(q, k, cos, sin, pos, dtype=f32):
    types = [t(q.shape, dtype), t(k.shape, dtype), t(cos.shape, dtype), t(sin.shape, dtype)]
    out_type = typeinfer_call(RoPE(), *types, t(pos.shape, i32))
    return EVAL.lookup(RoPE)(RoPE(), (q, k, cos, sin, pos), out_type)


def test_kernel_matches_pairwise_rotation():
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    k = rng.standard_normal((1, 5, 8)).astype(np.float32)
    cos, sin = caches(12, 8)
    pos = np.array([0, 3, 11, 3, 7], np.int32)
    q_rope, k_rope = run(q, k, cos, sin, pos)
    np.testing.assert_allclose(q_rope, rotate_loops(q, cos, sin, pos), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k_rope, rotate_loops(k, cos, sin, pos), rtol=1e-5, atol=1e-6)


def test_kernel_position_zero_is_identity_and_quarter_turn_swaps():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    ones, zeros = np.ones((2, 4), np.float32), np.zeros((2, 4), np.float32)
    cos = np.stack([ones[0], zeros[0]])  # position 0: angle 0; position 1: angle pi/2
    sin = np.stack([zeros[0], ones[0]])
    same, _ = run(x, x, cos, sin, np.array([0], np.int32))
    np.testing.assert_array_equal(same, x)
    turned, _ = run(x, x, cos, sin, np.array([1], np.int32))
    np.testing.assert_array_equal(turned, [[-3.0, -4.0, 1.0, 2.0]])


def test_kernel_bf16_rounds_once():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    cos, sin = (c.astype(ml_dtypes.bfloat16) for c in caches(6, 4))
    pos = np.array([5, 0, 2], np.int32)
    q_rope, k_rope = run(q, q, cos, sin, pos, bf16)
    expected = rotate_loops(q, cos, sin, pos).astype(ml_dtypes.bfloat16)
    assert q_rope.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(q_rope.astype(np.float64), expected.astype(np.float64))
    np.testing.assert_array_equal(k_rope.astype(np.float64), expected.astype(np.float64))


def test_kernel_refuses_positions_outside_the_cache():
    cos, sin = caches(4, 4)
    x = np.zeros((2, 4), np.float32)
    for bad in ([0, 4], [-1, 0]):
        with pytest.raises(EvalError, match=r"^RoPE: pos_ids must lie in \[0, 4\)"):
            run(x, x, cos, sin, np.array(bad, np.int32))
