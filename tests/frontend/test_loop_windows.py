# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Loop windows in the DSL (DESIGN §4.14; parser §1.7 and §1.9; hir §1.2).

parser §1.7: "`tile` binds a parser-only Python `slice(iv, iv+step, 1)`, so `x[:, i]` becomes a
Slice of the window"; "A window may be moved by a compile-time int (`i + C`)". parser §1.9: "A
runtime start needs a compile-time size (`start:start+K`)". Every program is evaluated on the
reference evaluator and compared with numpy written independently.
"""

import numpy as np

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.types.shard import Layout

RNG = np.random.default_rng(17)
M, K = 4, 16


def _ops(fn) -> list[str]:
    return sorted(
        type(n.target).__name__
        for n in iter_nodes(fn.body)
        if isinstance(n, Call) and not hasattr(n.target, "body")
    )


def _data(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_the_seed_minimal_example_sums_the_tiles():
    """hir §1.2 minimal example: `acc = zeros((M,), f32, storage="rmem")`, then
    `for i in tile(K, step=BLOCK): acc = acc + load_tile(x, i)` — the sum of the tiles.
    `load_tile(x, i)` is written as the window read `x[i]` staged into rmem (a storage change
    names its layout, hir Reshard stride resolution)."""

    @func
    def seed_loop(x: Tensor[(K,), "f32"]):
        acc = tf.zeros((M,), "f32", storage="rmem")
        for i in tile(K, step=M):
            acc = acc + tf.reshard(x[i], layout=Layout((M,)), storage="rmem")
        return acc

    x = _data(K)
    np.testing.assert_allclose(evaluate(seed_loop, x), x.reshape(K // M, M).sum(0), rtol=1e-6)
    assert seed_loop.return_type.storage.name == "RMEM"
    assert "DynamicSlice" in _ops(seed_loop) and "Gather" not in _ops(seed_loop)


def test_tile_variable_reads_its_window_on_any_axis():
    @func
    def column_tiles(x: Tensor[(M, K), "f32"]):
        acc = tf.zeros((M, 4), "f32")
        for i in tile(K, 4):
            acc = acc + x[:, i]
        return acc

    x = _data(M, K)
    np.testing.assert_allclose(evaluate(column_tiles, x), x.reshape(M, 4, 4).sum(1), rtol=1e-6)


def test_a_window_moved_by_a_compile_time_int():
    """parser §1.7: `x[:, i + C]` moves the window by C."""

    @func
    def shifted(x: Tensor[(M, K), "f32"]):
        acc = tf.zeros((M, 4), "f32")
        for i in tile(12, 4):
            acc = acc + x[:, i + 4]
        return acc

    x = _data(M, K)
    expected = x[:, 4:8] + x[:, 8:12] + x[:, 12:16]
    np.testing.assert_allclose(evaluate(shifted, x), expected, rtol=1e-6)


def test_range_windows_with_a_compile_time_size():
    """parser §1.9: `x[i:i + K]` and `x[i * K:(i + 1) * K]` under `range`."""

    @func
    def sliding(x: Tensor[(K, M), "f32"]):
        acc = tf.zeros((3, M), "f32")
        for i in range(0, K - 2, 2):
            acc = acc + x[i : i + 3]
        return acc

    @func
    def blocks(x: Tensor[(K, M), "f32"]):
        acc = tf.zeros((4, M), "f32")
        for i in range(K // 4):
            acc = acc + x[i * 4 : (i + 1) * 4]
        return acc

    x = _data(K, M)
    expected = sum(x[i : i + 3] for i in range(0, K - 2, 2))
    np.testing.assert_allclose(evaluate(sliding, x), expected, rtol=1e-5)
    np.testing.assert_allclose(evaluate(blocks, x), x.reshape(4, 4, M).sum(0), rtol=1e-5)


def test_a_range_variable_as_an_integer_index_drops_the_axis():
    """parser §1.9: an int index drops its axis; the loop variable is a runtime int."""

    @func
    def row_sum(x: Tensor[(K, M), "f32"]):
        acc = tf.zeros((M,), "f32")
        for i in range(K):
            acc = acc + x[i]
        return acc

    x = _data(K, M)
    np.testing.assert_allclose(evaluate(row_sum, x), x.sum(0), rtol=1e-5)


def test_two_windows_in_one_subscript():
    @func
    def diagonal_blocks(x: Tensor[(K, K), "f32"]):
        acc = tf.zeros((4, 4), "f32")
        for i in tile(K, 4):
            acc = acc + x[i, i]
        return acc

    x = _data(K, K)
    expected = sum(x[i : i + 4, i : i + 4] for i in range(0, K, 4))
    np.testing.assert_allclose(evaluate(diagonal_blocks, x), expected, rtol=1e-5)


def test_a_window_write_rebinds_the_carried_tensor():
    """DESIGN §4.14 windowed writes: `out[:, i] = value` writes the loop's window of a carry."""

    @func
    def tiled_exp(x: Tensor[(M, K), "f32"]):
        out = tf.zeros((M, K), "f32")
        for i in tile(K, 4):
            out[:, i] = tf.exp(x[:, i])
        return out

    @func
    def rows_doubled(x: Tensor[(K, M), "f32"]):
        out = tf.zeros((K, M), "f32")
        for i in range(K):
            out[i] = x[i] * 2.0
        return out

    x = _data(M, K)
    np.testing.assert_allclose(evaluate(tiled_exp, x), np.exp(x), rtol=1e-6)
    assert "DynamicUpdateSlice" in _ops(tiled_exp)
    xt = x.T.copy()
    np.testing.assert_allclose(evaluate(rows_doubled, xt), xt * 2.0, rtol=1e-6)


def test_a_symbolic_slice_inside_the_lower_bound_is_accepted():
    """DESIGN §4.14 / issue 17: `x[0:1]` on an axis whose DimVar has lower bound 1."""
    from tilefoundry import DimVar

    n = DimVar("N", 1, 64)

    @func
    def first_row(x: Tensor[(n, M), "f32"]):
        return x[0:1]

    x = _data(5, M)
    np.testing.assert_array_equal(evaluate(first_row, x), x[0:1])
