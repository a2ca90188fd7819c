# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The tile kernels of examples/ as Pallas kernels (issue 18 "Done when"; DESIGN §2, §3, §4.13).

Each example runs as one `pallas_call` in interpret mode on CPU (no GPU is available here) and
equals both the oracle (`evaluate`) and an independent float64 numpy reference at f32 rel 1e-5,
as written and after `compile` (fusion regions inside the loop body). Golden files pin each
kernel's grid and BlockSpecs: DESIGN §4.13 "a 'cta' mesh maps onto a Pallas grid (one program
instance per CTA)"; a Split over cta is a block of the local shape indexed by the program id,
a replicated value is the whole array.
"""

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.pallas import lower_pallas, run_pallas
from tilefoundry.ir.types.shard import make_mesh
from tilefoundry.passes import compile

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RTOL = 1e-5  # f32 rel 1e-5
ATOL = 64 * 2.0**-24  # for entries near 0: an f32 sum of 64 unit-scale products (the tiled
# matmul's contraction) is off by up to about 64 ulp(1) absolutely


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"pallas_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _tiled_matmul(rng):
    a, b = _normal(rng, 16, 64), _normal(rng, 64, 16)
    return (a, b), a.astype(np.float64) @ b


def _online_softmax(rng):
    x = _normal(rng, 8, 64) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (x,), e / e.sum(axis=1, keepdims=True)


def _flash_attention(rng):
    q, k, v = _normal(rng, 32, 16), _normal(rng, 64, 16), _normal(rng, 64, 16)
    scores = (q.astype(np.float64) @ k.T) / np.sqrt(16)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (q, k, v), (p / p.sum(axis=1, keepdims=True)) @ v


CASES = {
    "tiled_matmul": _tiled_matmul,
    "online_softmax": _online_softmax,
    "flash_attention": _flash_attention,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_kernel_equals_the_oracle_and_numpy(name):
    """Issue 18: the three tile kernels run through Pallas and equal the oracle (f32 rel 1e-5)."""
    fn = _example(name)
    arrays, expected = CASES[name](np.random.default_rng(18))
    got = run_pallas(fn, *arrays, interpret=True)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got, evaluate(fn, *arrays), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_example_kernel_equals_numpy(name):
    """DESIGN §2.11: a fused program keeps every op's rule, so its kernel computes the same."""
    fused, _ = compile(_example(name))
    arrays, expected = CASES[name](np.random.default_rng(19))
    np.testing.assert_allclose(
        run_pallas(fused, *arrays, interpret=True), expected, rtol=RTOL, atol=ATOL
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_grid_and_blockspecs_are_pinned(name, golden):
    """Golden: the launch summary `emit --pallas` prints first (grid, one BlockSpec a line)."""
    arrays, _ = CASES[name](np.random.default_rng(0))
    golden(f"pallas/{name}.txt", lower_pallas(_example(name), *arrays).summary())


def test_a_tile_loop_is_one_fori_loop_reading_windows_of_the_refs():
    """Issue 18: tile loops -> `lax.fori_loop` with `pl.ds` windows over the refs: the kernel
    holds one loop (a scan of the trip count, 64 / 16 = 4) and reads each tile from the
    parameter's Ref at a dynamic start (`a[:, k:k+16]`), never the whole Ref inside the loop."""
    arrays, _ = _tiled_matmul(np.random.default_rng(0))
    jaxpr = lower_pallas(_example("tiled_matmul"), *arrays).jaxpr()
    assert jaxpr.count("scan[") == 1 and "length=4" in jaxpr
    loop_body = jaxpr[jaxpr.index("let jaxpr") :].split("} in")[0]
    assert re.search(r"<- \w+\[(\w+):\1\+16,:\]", loop_body)  # b[k:k+16, :]
    assert re.search(r"<- \w+\[:,(\w+):\1\+16\]", loop_body)  # a[:, k:k+16]
    assert "[...]" not in loop_body


CTA2 = make_mesh((2, 2), ("r", "c"), topology="cta")
CTA4 = make_mesh((4,), ("x",), topology="cta")
BY_ROWS = (16 @ CTA4.x, 4)
CTA_ROWS = make_mesh((2,), ("r",), topology="cta")
ROW_BLOCK = (8 @ CTA_ROWS.r, 4)


@func
def two_d_grid(
    x: Tensor[(8 @ CTA2.r, 12 @ CTA2.c), "f32"], bias: Tensor[(8, 12), "f32"]
):  # fmt: skip
    return tf.exp(x) + bias


@func
def rows_over_two_axes(x: Tensor[(16 @ (CTA2.r * CTA2.c), 4), "f32"]):
    return tf.relu(x) * 2.0


@func
def replicated_to_split(x: Tensor[(16, 4), "f32"]):
    split = tf.reshard(x, layout=BY_ROWS, storage="smem")
    return tf.reshard(tf.sigmoid(split), layout=BY_ROWS, storage="gmem")


@func
def windows_cut_inside_the_loop(x: Tensor[(8 @ CTA_ROWS.r, 16), "f32"], w: Tensor[(8, 16), "f32"]):
    acc = tf.reshard(tf.zeros((8, 4), "f32"), layout=ROW_BLOCK, storage="rmem")
    for j in tile(16, 4):
        acc = acc + tf.reshard(x[:, j] * w[:, j], layout=ROW_BLOCK, storage="rmem")
    return tf.reshard(acc, layout=ROW_BLOCK, storage="gmem")


def test_a_replicated_window_is_cut_to_the_cta_block_inside_the_loop():
    """DESIGN §4.12 inside a tile loop: `w[:, j]` is replicated, so the product with the split
    `x[:, j]` reads only this CTA's rows of it, at the iteration's window."""
    rng = np.random.default_rng(5)
    x, w = _normal(rng, 8, 16), _normal(rng, 8, 16)
    got = run_pallas(windows_cut_inside_the_loop, x, w, interpret=True)
    want = (x.astype(np.float64) * w).reshape(8, 4, 4).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_a_two_dimensional_grid_cuts_the_replicated_operand_per_cta(golden):
    """DESIGN §4.12: a replicated operand is cut locally to the CTA's block (never moved);
    the grid is the 2x2 mesh and each BlockSpec indexes by (r, c)."""
    rng = np.random.default_rng(3)
    x, bias = _normal(rng, 8, 12), _normal(rng, 8, 12)
    kernel = lower_pallas(two_d_grid, x, bias)
    assert kernel.grid == (2, 2)
    golden("pallas/two_d_grid.txt", kernel.summary())
    got = run_pallas(two_d_grid, x, bias, interpret=True)
    np.testing.assert_allclose(got, np.exp(x.astype(np.float64)) + bias, rtol=RTOL, atol=ATOL)


def test_an_axis_split_over_two_mesh_axes_numbers_blocks_mixed_radix(golden):
    """shard_reading.canonical_splits: blocks are numbered mixed-radix over the splitting mesh
    axes, outermost first, so CTA (r, c) holds rows [4 * (2r + c), 4 * (2r + c) + 4)."""
    x = np.arange(64, dtype=np.float32).reshape(16, 4) - 20
    kernel = lower_pallas(rows_over_two_axes, x)
    assert kernel.inputs[0].block == (4, 4)
    assert [kernel.inputs[0].index_map((2, 2))(r, c) for r in (0, 1) for c in (0, 1)] == [
        (0, 0),
        (1, 0),
        (2, 0),
        (3, 0),
    ]
    golden("pallas/rows_over_two_axes.txt", kernel.summary())
    np.testing.assert_array_equal(
        run_pallas(rows_over_two_axes, x, interpret=True), np.maximum(x, 0) * 2
    )


def test_resharding_a_replicated_value_to_a_split_takes_this_ctas_block():
    """Reshard plain -> Split inside the kernel is a local cut (the simulator's scatter), and
    a storage-only Reshard is the value itself."""
    x = _normal(np.random.default_rng(4), 16, 4)
    got = run_pallas(replicated_to_split, x, interpret=True)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=RTOL)
    np.testing.assert_allclose(got, evaluate(replicated_to_split, x), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [100, 600])
def test_a_called_dispatch_base_is_inlined_as_its_variant(n):
    """hir dispatch: a call of a dispatch base runs the variant whose range holds N; inside
    a kernel the call is inlined (short rows: direct softmax; long rows: max-shifted)."""
    module = importlib.util.spec_from_file_location(
        "pallas_dispatch", EXAMPLES / "dispatch_kernel.py"
    )
    loaded = importlib.util.module_from_spec(module)
    module.loader.exec_module(loaded)
    entry = loaded.RowSoftmax.lookup("entry")
    x = _normal(np.random.default_rng(n), 4, n)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    got = run_pallas(entry, x, interpret=True)
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=RTOL, atol=ATOL)


def test_a_program_with_array_constants_passes_them_as_inputs(golden):
    """A kernel may not capture arrays: the transformer block's RoPE caches and positions (array
    constants) become whole-array inputs after the parameters; norms, RoPE, softmax attention
    and the MLP run in the one program and agree with the oracle normwise at f32 rel 1e-5."""
    fn = _example("transformer_block")
    rng = np.random.default_rng(7)
    arrays = [_normal(rng, *[int(d) for d in p.type.shape]) * 0.1 for p in fn.params]
    kernel = lower_pallas(fn, *arrays)
    assert len(kernel.constants) == 3
    golden("pallas/transformer_block.txt", kernel.summary())
    got, want = run_pallas(fn, *arrays, interpret=True), evaluate(fn, *arrays)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@func
def blocked_matmul(a: Tensor[(8, 16), "f32"], b: Tensor[(16, 8), "f32"]):
    out = tf.zeros((8, 8), "f32")
    for i in tile(8, 4):
        acc = tf.zeros((4, 8), "f32")
        for k in tile(16, 4):
            acc = acc + a[i, k] @ b[k]
        out[i] = acc
    return out


def test_nested_tile_loops_write_their_tiles_with_dynamic_update_slice():
    """DESIGN §4.14: `out[i] = acc` is a DynamicUpdateSlice at the outer loop's window, and each
    loop is its own fori_loop (two scans); the product equals numpy."""
    rng = np.random.default_rng(8)
    a, b = _normal(rng, 8, 16), _normal(rng, 16, 8)
    assert lower_pallas(blocked_matmul, a, b).jaxpr().count("scan[") == 2
    got = run_pallas(blocked_matmul, a, b, interpret=True)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=RTOL, atol=ATOL)


@func
def exact_gelu_and_integer_bits(
    x: Tensor[(16 @ CTA4.x, 4), "f32"], n: Tensor[(16 @ CTA4.x, 4), "i32"], k: Tensor[(4,), "i32"]
):
    gelu = 0.5 * x * (1.0 + tf.erf(x * 0.7071067811865476))
    return gelu * tf.sign(x), tf.bitwise_xor(tf.shift_left(n, tf.rem(n, k)), tf.pow(n, k))


def _shifted_xor_power(v: int, k: int) -> int:
    """(v << rem(v, k)) ^ v**k on 32 bits: a negative amount reads as unsigned, past the width."""
    v, k = int(v), int(k)
    amount = int(math.fmod(v, k))
    shifted = v << amount if amount >= 0 else 0
    return ((shifted ^ v**k) + 2**31) % 2**32 - 2**31


@pytest.mark.slow
def test_the_new_elementwise_kinds_run_inside_one_kernel():
    """Issue 29 item 6 at the Pallas exit: erf, sign, and the integer kinds (a shift by a
    runtime amount, rem, pow with wrap) in one pallas_call, against numpy and Python integers."""
    rng = np.random.default_rng(29)
    x = _normal(rng, 16, 4)
    n = rng.integers(-50, 50, (16, 4)).astype(np.int32)
    k = np.array([3, 5, 7, 9], np.int32)
    gelu, bits = run_pallas(exact_gelu_and_integer_bits, x, n, k, interpret=True)
    erf = np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2))
    np.testing.assert_allclose(gelu, 0.5 * x * (1 + erf) * np.sign(x), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(bits, np.vectorize(_shifted_xor_power, otypes=[np.int64])(n, k))
