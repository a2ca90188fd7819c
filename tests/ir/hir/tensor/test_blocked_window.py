"""Per-device loop windows (issue 29): BlockedDynamicSlice / BlockedDynamicUpdateSlice.

DESIGN §4.14 (semantic-analysis §3.2): a runtime window of a split axis fails closed, except the
one whose owner boundary is proven by construction: a loop over exactly one device's share of
the axis, each device walking its own block (expert parallelism's `for e in range(E_LOCAL):
w[e]`). Its global meaning is the same window in each of `blocks` blocks; the kernels are
checked against numpy written out by hand, the typing rules as a case table, and the frontend's
choice of the op on the loop's domain.
"""

import numpy as np
import pytest

from tilefoundry import Tensor, func
from tilefoundry.analysis import typeinfer_call
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir.tensor import BlockedDynamicSlice, BlockedDynamicUpdateSlice
from tilefoundry.ir.types import f32, i64, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import EVAL

EP = make_mesh((4,), ("ep",))
GRID = make_mesh((2, 2), ("a", "b"))
START = make_tensor_type((), i64, "umat")
INNER = make_tensor_type(
    (8, 3),
    f32,
    layout=ShardLayout(Layout((4, 2, 3), (6, 3, 1)), (S(1),), make_mesh((2,), ("ep",))),
)
"""Axis 0 factored (4, 2) with the Split on the inner 2: a device holds strided rows."""


def plain(shape):
    return make_tensor_type(shape, f32)


def on(mesh, shape, *attrs):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


READ = BlockedDynamicSlice(axis=0, blocks=4, size=1)
READ_CASES = [
    # (id, op, x, expected type | error regex)
    ("plain", READ, plain((8, 3)), plain((4, 3))),
    ("one block per device: each reads its own", READ, on(EP, (8, 3), S(0)), on(EP, (4, 3), S(0))),
    ("two mesh axes, one block each", READ, on(GRID, (8, 3), S(0), S(0)),
     on(GRID, (4, 3), S(0), S(0))),
    ("two blocks per device", READ, on(make_mesh((2,), ("ep",)), (8, 3), S(0)),
     on(make_mesh((2,), ("ep",)), (4, 3), S(0))),
    ("another axis split", READ, on(EP, (8, 4), S(1)), on(EP, (4, 4), S(1))),
    ("replicated", READ, on(EP, (8, 3), B), plain((4, 3))),
    # a selection commutes with every pending reduction
    ("a pending sum carries", READ, on(EP, (8, 3), P("sum")), on(EP, (4, 3), P("sum"))),
    ("a pending max beside the split", READ, on(GRID, (8, 4), S(0), P("max")),
     on(GRID, (4, 4), S(0), P("max"))),
    ("wider window in each block", BlockedDynamicSlice(axis=1, blocks=2, size=3),
     on(make_mesh((2,), ("ep",)), (2, 8), S(1)), on(make_mesh((2,), ("ep",)), (2, 6), S(1))),
    # any other Split of the windowed axis still fails closed
    ("more devices than blocks", BlockedDynamicSlice(axis=0, blocks=2, size=1),
     on(EP, (8, 3), S(0)), r"over mesh axis 0 \('ep'\) \(4 devices\).*in each of 2 blocks"),
    ("devices not dividing the blocks", BlockedDynamicSlice(axis=0, blocks=3, size=1),
     on(make_mesh((2,), ("ep",)), (6, 3), S(0)), r"\(2 devices\).*in each of 3 blocks"),
    ("an inner factor", READ, INNER, r"\(2 devices, on inner factors\).*in each of 4 blocks"),
    # the blocks must tile the axis and hold the window
    ("blocks not dividing the axis", BlockedDynamicSlice(axis=0, blocks=3, size=1),
     plain((8, 3)), r"axis 0 of extent 8 does not hold 3 equal blocks"),
    ("window wider than a block", BlockedDynamicSlice(axis=0, blocks=4, size=3), plain((8, 3)),
     r"window of 3 elements is wider than one block of axis 0 \(4 blocks of 2\)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "x", "expected"), [pytest.param(*c[1:], id=c[0]) for c in READ_CASES]
)
def test_read_typeinfer(op, x, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x, START)
        return
    assert typeinfer_call(op, x, START) == expected


WRITE = BlockedDynamicUpdateSlice(axis=0, blocks=4)
WRITE_CASES = [
    ("plain", WRITE, plain((8, 3)), plain((4, 3)), plain((8, 3))),
    ("split alike", WRITE, on(EP, (8, 3), S(0)), on(EP, (4, 3), S(0)), on(EP, (8, 3), S(0))),
    ("update replicated", WRITE, on(EP, (8, 3), S(0)), plain((4, 3)),
     r"'x' and 'update' must be split the same way"),
    ("update not blocks windows", WRITE, plain((8, 3)), plain((6, 3)),
     r"'update' extent 6 on axis 0 is not 4 equal windows"),
    ("other extents differ", WRITE, plain((8, 3)), plain((4, 2)),
     r"'update' extent 2 differs from 'x' extent 3 on axis 1"),
    ("pending sums alike", WRITE, on(EP, (8, 3), P("sum")), on(EP, (4, 3), P("sum")),
     on(EP, (8, 3), P("sum"))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "x", "update", "expected"), [pytest.param(*c[1:], id=c[0]) for c in WRITE_CASES]
)
def test_write_typeinfer(op, x, update, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, x, update, START)
        return
    assert typeinfer_call(op, x, update, START) == expected


# ---- the kernels: the window at the same place in each block, clamped as DynamicSlice clamps


def blocked_read(x, start, blocks, size, scale=1, offset=0):
    """numpy, by hand: block b's elements [p, p + size), p clamped into [0, L - size]."""
    length = x.shape[0] // blocks
    p = min(max(scale * start + offset, 0), length - size)
    return np.concatenate([x[b * length + p : b * length + p + size] for b in range(blocks)])


@pytest.mark.parametrize(
    ("blocks", "size", "start", "scale", "offset"),
    [(4, 1, 1, 1, 0), (2, 2, 1, 2, 0), (2, 3, 5, 1, 0), (1, 2, 3, 1, 1), (2, 1, -4, 1, 0)],
)
def test_read_kernel(blocks, size, start, scale, offset):
    x = np.arange(8 * 3, dtype=np.float32).reshape(8, 3)
    op = BlockedDynamicSlice(axis=0, blocks=blocks, size=size, scale=scale, offset=offset)
    got = EVAL.lookup(BlockedDynamicSlice)(op, (x, np.int64(start)), None)
    np.testing.assert_array_equal(got, blocked_read(x, start, blocks, size, scale, offset))


def test_write_kernel_replaces_each_blocks_window():
    x = np.zeros((8, 2), np.float32)
    update = np.arange(4 * 2, dtype=np.float32).reshape(4, 2) + 1
    op = BlockedDynamicUpdateSlice(axis=0, blocks=2)
    got = EVAL.lookup(BlockedDynamicUpdateSlice)(op, (x, update, np.int64(1)), None)
    want = np.zeros((8, 2), np.float32)
    want[1:3], want[5:7] = update[:2], update[2:]
    np.testing.assert_array_equal(got, want)


# ---- the frontend: a loop over exactly one device's share picks the per-device window ----------


E, C, H = 8, 3, 4
E_LOCAL = E // 4


def _ops(fn) -> list[str]:
    return sorted(
        type(n.target).__name__
        for n in iter_nodes(fn.body)
        if isinstance(n, Call) and not hasattr(n.target, "body")
    )


def test_a_loop_over_the_local_experts_walks_each_devices_own():
    @func
    def experts(x: Tensor[(E @ EP.ep, C, H), "f32"], w: Tensor[(E @ EP.ep, H, H), "f32"]):
        out = tf.reshard(tf.zeros((E, C, H), "f32"), layout=(E @ EP.ep, C, H), storage="gmem")
        for e in range(E_LOCAL):
            out[e] = tf.relu(x[e] @ w[e])
        return out

    assert {"BlockedDynamicSlice", "BlockedDynamicUpdateSlice"} <= set(_ops(experts))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((E, C, H)).astype(np.float32)
    w = rng.standard_normal((E, H, H)).astype(np.float32)
    np.testing.assert_allclose(evaluate(experts, x, w), np.maximum(x @ w, 0), rtol=1e-6)


def test_a_window_of_each_devices_share_keeps_the_device_axis():
    """`x[e]` reads one row per device: the axis stays, one row per device (shape 4, not 1)."""

    @func
    def rows(x: Tensor[(E @ EP.ep, C), "f32"]):
        acc = tf.reshard(tf.zeros((4, C), "f32"), layout=(4 @ EP.ep, C), storage="gmem")
        for e in range(E_LOCAL):
            acc = acc + x[e]
        return acc

    x = np.arange(E * C, dtype=np.float32).reshape(E, C)
    want = x.reshape(4, E_LOCAL, C).sum(axis=1)  # device d: its rows 2d and 2d + 1
    np.testing.assert_array_equal(evaluate(rows, x), want)


def test_chunks_of_each_devices_share():
    """`x[i * K:(i + 1) * K]` over range(L // K): K rows of each device's block per step."""

    @func
    def chunks(x: Tensor[(16 @ EP.ep, C), "f32"]):
        acc = tf.reshard(tf.zeros((8, C), "f32"), layout=(8 @ EP.ep, C), storage="gmem")
        for i in range(2):
            acc = acc + x[i * 2 : (i + 1) * 2]
        return acc

    x = np.arange(16 * C, dtype=np.float32).reshape(16, C)
    want = x.reshape(4, 2, 2, C).sum(axis=1).reshape(8, C)
    np.testing.assert_array_equal(evaluate(chunks, x), want)


def test_a_loop_over_more_than_a_devices_share_still_fails_closed():
    with pytest.raises(VerifyError, match=r"along the windowed axis 0.*one device's share"):

        @func
        def every_expert(x: Tensor[(E @ EP.ep, C), "f32"]):
            acc = tf.zeros((C,), "f32")
            for e in range(E):
                acc = acc + x[e]
            return acc
