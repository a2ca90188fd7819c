# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The mesh simulation follows the types (DESIGN §4.12, issue 15 item 1, issue 17).

"A value whose *type* is plain or fully Broadcast is one replicated global value, even when it
was computed on a mesh (e.g. `x + reshard(partial, Broadcast)`); only `local` produces a Local
value." So the Megatron residual, a DP x TP block and a cta-mesh tile kernel that stages a
fully-Broadcast tile through a reshape all run, and every result equals plain numpy on the global
arrays (float64 reference, f32 within rel 1e-5), never the evaluator's own unsharded run.
"""

from pathlib import Path

import numpy as np
import pytest

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types.shard import B, Layout, Mesh, ShardLayout, Topology, make_mesh

TP = make_mesh((8,), ("tp",))
GRID = make_mesh((2, 4), ("dp", "tp"))
CTA = make_mesh((4,), ("c",), topology="cta")
BATCH, MODEL, HIDDEN = 16, 32, 64


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def gelu64(x):
    """tanh-approximated GELU in float64 (the kernel's formula, written out independently)."""
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


# -- the Megatron residual on 8 devices ------------------------------------------------------------

REPLICATED = ShardLayout(Layout((BATCH, MODEL)), (B,), TP)


@func
def megatron_two_layers(
    x: Tensor[(BATCH, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN @ TP.tp), "f32"],
    w2: Tensor[(HIDDEN @ TP.tp, MODEL), "f32"],
    w3: Tensor[(MODEL, HIDDEN @ TP.tp), "f32"],
    w4: Tensor[(HIDDEN @ TP.tp, MODEL), "f32"],
):
    h = tf.gelu(x @ w1)
    y = x + tf.reshard(h @ w2, layout=REPLICATED, storage="gmem")
    g = tf.gelu(y @ w3)
    return y + tf.reshard(g @ w4, layout=REPLICATED, storage="gmem")


def test_the_megatron_residual_is_typed_plain_and_feeds_the_next_sharded_layer():
    """DESIGN §4.12: `x + reshard(partial, Broadcast)` is plain; the next column-split matmul
    reads it as one global value (each device slices its replica locally)."""
    residual = megatron_two_layers.body.args[0]
    assert residual.type.layout is None
    rng = np.random.default_rng(1)
    x, w1, w2, w3, w4 = (
        (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
        for s in [
            (BATCH, MODEL),
            (MODEL, HIDDEN),
            (HIDDEN, MODEL),
            (MODEL, HIDDEN),
            (HIDDEN, MODEL),
        ]
    )
    got = evaluate(megatron_two_layers, x, w1, w2, w3, w4)
    x64, w = x.astype(np.float64), [a.astype(np.float64) for a in (w1, w2, w3, w4)]
    y = x64 + gelu64(x64 @ w[0]) @ w[1]
    want = y + gelu64(y @ w[2]) @ w[3]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


LAYERS = 3


@func
def megatron_layer_loop(
    x: Tensor[(BATCH, MODEL), "f32"],
    w1: Tensor[(LAYERS, MODEL, HIDDEN @ TP.tp), "f32"],
    w2: Tensor[(LAYERS, HIDDEN @ TP.tp, MODEL), "f32"],
):
    for layer in range(LAYERS):
        up = tf.gather(w1, layer, axis=0)
        down = tf.gather(w2, layer, axis=0)
        x = x + tf.reshard(tf.relu(x @ up) @ down, layout=REPLICATED, storage="gmem")
    return x


def test_an_l_layer_megatron_stack_as_a_loop_carries_the_plain_residual():
    """The loop carry is typed plain, so each iteration's residual is one global value that the
    next iteration's column-split matmul reads (hir §1.2 loops, DESIGN §4.12)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((BATCH, MODEL)).astype(np.float32)
    w1 = (rng.standard_normal((LAYERS, MODEL, HIDDEN)) / np.sqrt(MODEL)).astype(np.float32)
    w2 = (rng.standard_normal((LAYERS, HIDDEN, MODEL)) / np.sqrt(HIDDEN)).astype(np.float32)
    want = x.astype(np.float64)
    for layer in range(LAYERS):
        want = want + np.maximum(want @ w1[layer], 0) @ w2[layer]
    np.testing.assert_allclose(evaluate(megatron_layer_loop, x, w1, w2), want, rtol=1e-5, atol=1e-5)


# -- DP x TP on a 2x4 mesh -------------------------------------------------------------------------


@func
def dp_tp_block(
    x: Tensor[(BATCH @ GRID.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN @ GRID.tp), "f32"],
    w2: Tensor[(HIDDEN @ GRID.tp, MODEL), "f32"],
    w3: Tensor[(MODEL, HIDDEN @ GRID.tp), "f32"],
):
    h = tf.relu(x @ w1)
    y = x + tf.reshard(h @ w2, layout=(BATCH @ GRID.dp, MODEL), storage="gmem")
    z = tf.reshard(y @ w3, layout=(BATCH @ GRID.dp, HIDDEN), storage="gmem")
    total = tf.reshard(
        tf.reduce(z, axes=(0,), keepdim=False, kind="sum"),
        layout=ShardLayout(Layout((HIDDEN,)), (B, B), GRID),
        storage="gmem",
    )
    back = tf.exp(total * 0.01) @ tf.transpose(w1, (1, 0))  # contracts the tp split: Partial
    return z, tf.reshard(back, layout=ShardLayout(Layout((MODEL,)), (B, B), GRID), storage="gmem")


def test_a_dp_x_tp_block_on_a_2x4_mesh():
    """Batch split over dp, Megatron over tp; the fully-Broadcast column sum is one global value
    that a plain op and a matmul with a split weight then read."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((BATCH, MODEL)).astype(np.float32)
    w1, w2, w3 = (
        (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)
        for s in [(MODEL, HIDDEN), (HIDDEN, MODEL), (MODEL, HIDDEN)]
    )
    z, v = evaluate(dp_tp_block, x, w1, w2, w3)
    x64, (a, b, c) = x.astype(np.float64), [w.astype(np.float64) for w in (w1, w2, w3)]
    y = x64 + np.maximum(x64 @ a, 0) @ b
    z64 = y @ c
    np.testing.assert_allclose(z, z64, rtol=1e-5, atol=1e-5 * np.abs(z64).max())
    v64 = np.exp(z64.sum(axis=0) * 0.01) @ a.T
    np.testing.assert_allclose(v, v64, rtol=1e-5, atol=1e-5 * np.abs(v64).max())


# -- a tile kernel on a cta mesh -------------------------------------------------------------------

M, K, N, KT = 64, 32, 16, 2
B_SMEM = ShardLayout(Layout((K, N)), (B,), CTA)
B_TILES = ShardLayout(Layout((KT, K // KT, N)), (B,), CTA)


@func
def cta_tiled_matmul(a: Tensor[(M @ CTA.c, K), "f32"], b: Tensor[(K, N), "f32"]):
    a_r = tf.reshard(a, layout=(M @ CTA.c, K), storage="rmem")
    b_s = tf.reshard(b, layout=B_SMEM, storage="smem")
    b_tiles = tf.reshard(tf.reshape(b_s, (KT, K // KT, N)), layout=B_TILES, storage="rmem")
    a_tiles = tf.transpose(tf.reshape(a_r, (M, KT, K // KT)), (1, 0, 2))
    acc = tf.reduce(tf.matmul(a_tiles, b_tiles), axes=(0,), keepdim=False, kind="sum")
    return tf.reshard(acc, layout=(M @ CTA.c, N), storage="gmem")


def test_a_cta_tile_kernel_stages_a_broadcast_tile_through_a_reshape():
    """Issue 17: a reshape of a fully-Broadcast smem tile is typed plain (DESIGN §4.7) and a
    Reshard of it stages it into rmem; each CTA then multiplies its row block by the K tiles."""
    staged = cta_tiled_matmul.body.args[0].args[0].args[1]  # reshard(reshape(b_s)) into rmem
    assert staged.args[0].type.layout is None and str(staged.args[0].type.storage) != "rmem"
    a, b = rand(M, K), rand(K, N, seed=1)
    got = evaluate(cta_tiled_matmul, a, b)
    close(got, a.astype(np.float64) @ b.astype(np.float64))


WARPS = Mesh((Topology("warp", 2), Topology("thread", 4)), Layout((2, 4), (4, 1)), ("warp", "lane"))
ROWS = 16
SCALE_SMEM = ShardLayout(Layout((4, 4)), (B, B), WARPS)
SCALE_RMEM = ShardLayout(Layout((16,)), (B, B), WARPS)


@func
def warp_scaled_rows(
    x: Tensor[(ROWS @ WARPS.warp, 16 @ WARPS.lane), "f32"], s: Tensor[(4, 4), "f32"]
):
    staged = tf.reshard(s, layout=SCALE_SMEM, storage="smem")
    flat = tf.reshard(tf.reshape(staged, (16,)), layout=SCALE_RMEM, storage="rmem")
    x_r = tf.reshard(x, layout=(ROWS @ WARPS.warp, 16 @ WARPS.lane), storage="rmem")
    y = tf.exp(x_r * 0.5) * flat
    return tf.reshard(y, layout=(ROWS @ WARPS.warp, 16 @ WARPS.lane), storage="gmem")


def test_a_warp_by_thread_mesh_program_runs_per_thread():
    """DESIGN §4.13: warp/thread meshes are simulated by the reference evaluator; a flattened
    fully-Broadcast smem tile is one global value each thread reads whole."""
    x, s = rand(ROWS, 16), rand(4, 4, seed=1)
    want = np.exp(x.astype(np.float64) * 0.5) * s.reshape(16)
    close(evaluate(warp_scaled_rows, x, s), want)


# -- refusals carry the location of the call -------------------------------------------------------


@func
def reshards_a_local(x: Tensor[(8 @ TP.tp,), "f32"]):
    mine = tf.local(x) * 2.0
    return tf.reshard(mine, layout=ShardLayout(Layout((1,)), (B,), TP), storage="gmem")


def test_a_simulator_refusal_names_the_op_and_its_source_location():
    """DESIGN §3 error contract: `"<OpClass>: <what is wrong>; <the fix>"` and `at file:line:col`
    of the call. A per-device value has no global value to reshard."""
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "return tf.reshard(mine" in text)
    col = lines[line - 1].index("tf.reshard") + 1
    with pytest.raises(UnsupportedError) as info:
        evaluate(reshards_a_local, np.arange(8, dtype=np.float32))
    err = info.value
    assert err.message.startswith("Reshard: cannot reshard a per-device value")
    assert "reshard the sharded value" in err.message
    location = (Path(err.location.file).resolve(), err.location.line, err.location.col)
    assert location == (Path(__file__).resolve(), line, col)
    assert str(err).endswith(f"at {err.location.file}:{line}:{col}")


QUAD = make_mesh((4,), ("q",))


@func
def adds_a_local_to_a_split(x: Tensor[(32 @ QUAD.q,), "f32"], y: Tensor[(8 @ QUAD.q,), "f32"]):
    return tf.local(x) + y


def test_a_local_value_next_to_a_split_one_is_refused_with_a_fix_that_works():
    """Only `local` makes a per-device value (DESIGN §4.12); next to a split argument it has no
    block reading, and the remedy is not a Reshard (a per-device value has none)."""
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "return tf.local(x) + y" in text)
    with pytest.raises(UnsupportedError) as info:
        evaluate(adds_a_local_to_a_split, rand(32), rand(8, seed=1))
    err = info.value
    assert err.message.startswith("Binary: operand 'lhs' is a per-device (Local) value")
    assert "apply the op to the sharded value before taking its local view" in err.message
    assert (err.location.line, err.location.col) == (line, lines[line - 1].index("tf.local") + 1)


@func
def gathers_rows(x: Tensor[(8 @ QUAD.q, 3), "f32"], i: Tensor[(2,), "i32"]):
    rows = tf.gather(x, i, axis=0)
    return tf.reshard(rows, layout=ShardLayout(Layout((2, 3)), (B,), QUAD), storage="gmem")


def test_an_evaluation_error_on_the_mesh_carries_the_location_of_its_call():
    """DESIGN §3: a bad input at evaluation time is an EvalError; raised while simulating a call
    it ends with `at file:line:col` of that call, like every refusal."""
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "rows = tf.gather(x, i, axis=0)" in text)
    col = lines[line - 1].index("tf.gather") + 1
    with pytest.raises(EvalError) as info:
        evaluate(gathers_rows, rand(8, 3), np.array([1, 9], dtype=np.int32))
    text = str(info.value)
    assert text.startswith("Gather: index 9 is out of range for axis 0 of extent 8")
    assert (
        text.endswith(f":{line}:{col}")
        and Path(text.rsplit("at ", 1)[1].rsplit(":", 2)[0]).resolve() == Path(__file__).resolve()
    )


def test_a_bare_python_error_in_a_simulation_rule_is_a_located_internal_error(monkeypatch):
    """Issue 29 item 4: every simulator failure is located, never a bare Python error. A rule's
    own bug (an IndexError, as RoPE's plain branch once raised) is an InternalCompilerError whose
    first line, the one the CLI prints, names the op and the call; the original is its cause."""
    import tilefoundry.evaluator.interpreter as interpreter

    def broken_rule(call):
        raise IndexError("tuple index out of range")

    monkeypatch.setattr(interpreter, "run_call", broken_rule)
    lines = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "rows = tf.gather(x, i, axis=0)" in text)
    col = lines[line - 1].index("tf.gather") + 1
    with pytest.raises(InternalCompilerError) as info:
        evaluate(gathers_rows, rand(8, 3), np.array([1, 2], dtype=np.int32))
    first = str(info.value).splitlines()[0]
    assert first.startswith("Gather at ") and f":{line}:{col}: " in first
    assert first.endswith(
        ": the simulator failed on this call (IndexError: tuple index out of range)"
    )
    assert isinstance(info.value.__cause__, IndexError)
