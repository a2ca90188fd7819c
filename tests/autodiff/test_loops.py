# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Reverse mode through a loop (issue 25 item 4; docs/autodiff.md "Loops"): a GridRegionExpr
differentiates as a scan does. The forward loop stacks what its backward reads, the backward is
a reversed GridRegionExpr over the carries' cotangents, a stacked weight read through a window
`w[i]` gets its gradient row by row, and every collective a rule places stays inside the
backward loop.

The truths: closed forms (d/dx sum(x^8) = 8 x^7), numpy formulas of the same math, and central
finite differences in float64 on the evaluator for random small loop programs (hypothesis).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.programs import assert_gradients_match_central_differences
from tilefoundry import Tensor, func, grad, tile, value_and_grad, vjp
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.text import format_ir
from tilefoundry.ir.types.shard import Layout
from tilefoundry.passes import compile as compile_pipeline
from tilefoundry.passes import verify
from tilefoundry.sharding.shard_reading import pending_partials

RNG = np.random.default_rng(26)


@func
def repeated(x: Tensor[(4,), "f64"]):
    for _ in range(3):
        x = x * x
    return tf.reduce(x, axes=(0,), keepdim=False, kind="sum")


@func
def stacked(x: Tensor[(4, 8), "f64"], ws: Tensor[(3, 8, 8), "f64"]):
    for layer in range(3):
        x = tf.tanh(x @ ws[layer])
    return tf.reduce(x, axes=(0, 1), keepdim=False, kind="sum")


def stacked_gradients(x, ws):
    """d/dx and d/dws of sum(tanh(... tanh(x @ ws[0]) ... @ ws[2])), by hand."""
    outs = [x]
    for w in ws:
        outs.append(np.tanh(outs[-1] @ w))
    back, d_ws = np.ones_like(outs[-1]), np.zeros_like(ws)
    for layer in reversed(range(len(ws))):
        back = back * (1.0 - outs[layer + 1] ** 2)
        d_ws[layer] = outs[layer].T @ back
        back = back @ ws[layer].T
    return back, d_ws


def assert_the_stack_gradients(fn, x, ws):
    """`fn` computes sum(tanh(... tanh(x @ ws[0]) ... @ ws[-1])): its gradient type-checks and
    equals `stacked_gradients`."""
    gradient = grad(fn, argnums=(0, 1))
    verify(gradient)
    for g, want in zip(evaluate(gradient, x, ws), stacked_gradients(x, ws), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


def forward_and_backward(gradient):
    """The gradient's two loops: the forward (its first carry starts at the first parameter)
    and the backward."""
    loops = [n for n in iter_nodes(gradient.body) if isinstance(n, GridRegionExpr)]
    assert len(loops) == 2
    (forward,) = [loop for loop in loops if loop.init_args[0] is gradient.params[0]]
    (backward,) = [loop for loop in loops if loop is not forward]
    return forward, backward


def test_a_carry_differentiates_through_every_iteration():
    x = RNG.standard_normal(4)
    gradient = grad(repeated)
    verify(gradient)
    np.testing.assert_allclose(evaluate(gradient, x), 8 * x**7, rtol=1e-12)


def test_a_value_read_only_by_the_body_gets_its_gradient():
    """The loop carries only `out` (from zeros); w reaches the output through what the body
    reads from outside the loop (as examples/moe.py's expert loop reads its weights): d/dw of
    sum(x * w) is x, not zero."""

    @func
    def row_products(x: Tensor[(4, 3), "f64"], w: Tensor[(4, 3), "f64"]):
        out = tf.zeros((4, 3), "f64")
        for i in range(4):
            out[i] = x[i] * w[i]
        return tf.reduce(out, axes=(0, 1), keepdim=False, kind="sum")

    x, w = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    gx, gw = evaluate(grad(row_products, argnums=(0, 1)), x, w)
    np.testing.assert_allclose(gw, x, rtol=1e-14)
    np.testing.assert_allclose(gx, w, rtol=1e-14)


def test_a_stacked_weight_gets_its_gradient_row_by_row():
    assert_the_stack_gradients(
        stacked, RNG.standard_normal((4, 8)), RNG.standard_normal((3, 8, 8)) / 3
    )


def test_value_and_grad_and_vjp_read_the_forward_from_the_extended_loop():
    """The forward value comes from the loop that also stacks; vjp of the loop's (4, 8) output
    takes its cotangent as the seed."""
    x, ws = RNG.standard_normal((4, 8)), RNG.standard_normal((3, 8, 8)) / 3
    value, (gx, gws) = evaluate(value_and_grad(stacked, argnums=(0, 1)), x, ws)
    np.testing.assert_allclose(value, evaluate(stacked, x, ws), rtol=1e-14)
    want = stacked_gradients(x, ws)
    np.testing.assert_allclose(gx, want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gws, want[1], rtol=1e-12, atol=1e-14)

    @func
    def layers(x: Tensor[(4, 8), "f64"], ws: Tensor[(3, 8, 8), "f64"]):
        for layer in range(3):
            x = tf.tanh(x @ ws[layer])
        return x

    out, (dx, dws) = evaluate(vjp(layers), x, ws, np.ones((4, 8)))
    np.testing.assert_allclose(out, np.tanh(np.tanh(np.tanh(x @ ws[0]) @ ws[1]) @ ws[2]))
    np.testing.assert_allclose(dx, want[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(dws, want[1], rtol=1e-12, atol=1e-14)


def test_the_forward_stacks_activations_and_the_backward_is_one_reversed_loop():
    """Two loops: the forward, extended to write what the rules read (each iteration's input and
    its tanh) into (3, 4, 8) stacks (`dynamic_update_slice`), and the backward over the 3
    iterations, carrying x's cotangent and ws's gradient. The weight window `ws[layer]` reads no
    carry, so the backward re-reads it: no (3, 8, 8) stack of weights."""
    gradient = grad(stacked, argnums=(0, 1))
    forward, backward = forward_and_backward(gradient)
    stacks = {tuple(c.type.shape) for c in forward.carried_args[1:]}
    assert stacks == {(3, 4, 8)}
    assert "dynamic_update_slice" in format_ir(gradient)
    assert [tuple(c.type.shape) for c in backward.carried_args] == [(4, 8), (3, 8, 8)]
    assert backward.extent == 3


def test_a_loop_gradient_compiles_and_runs_on_xla():
    pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")
    from tilefoundry.exits.runtimes.xla import run_xla

    x, ws = RNG.standard_normal((4, 8)), RNG.standard_normal((3, 8, 8)) / 3
    gradient = grad(stacked, argnums=(0, 1))
    want = stacked_gradients(x, ws)
    for program in (gradient, compile_pipeline(gradient)[0]):
        for g, w in zip(run_xla(program, x, ws), want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-12, atol=1e-14)


def test_a_tile_loop_accumulating_in_registers_differentiates():
    """The transpose of a storage move is the move back: the register accumulator's cotangent
    reaches the gmem tile product as a gmem value (a storage change names its layout, hir
    Reshard stride resolution)."""

    @func
    def tiled(a: Tensor[(4, 32), "f64"], b: Tensor[(32, 8), "f64"]):
        acc = tf.zeros((4, 8), "f64", storage="rmem")
        for k in tile(32, 8):
            acc = acc + tf.reshard(a[:, k] @ b[k], layout=Layout((4, 8)), storage="rmem")
        out = tf.reshard(acc, layout=Layout((4, 8)), storage="gmem")
        return tf.reduce(tf.tanh(out), axes=(0, 1), keepdim=False, kind="sum")

    a, b = RNG.standard_normal((4, 32)), RNG.standard_normal((32, 8))
    gradient = grad(tiled, argnums=(0, 1))
    verify(gradient)
    back = 1.0 - np.tanh(a @ b) ** 2
    for g, want in zip(evaluate(gradient, a, b), (back @ b.T, a.T @ back), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-13)


def test_a_tile_loop_nested_in_a_layer_loop_differentiates():
    """Each layer's matmul walked over K tiles (an inner loop whose carry is the accumulator):
    the inner loop's backward runs inside the outer backward's iterations."""

    @func
    def nested(x: Tensor[(4, 32), "f64"], ws: Tensor[(3, 32, 32), "f64"]):
        for layer in range(3):
            acc = tf.zeros((4, 32), "f64")
            for k in tile(32, 8):
                acc = acc + x[:, k] @ ws[layer][k]
            x = tf.tanh(acc)
        return tf.reduce(x, axes=(0, 1), keepdim=False, kind="sum")

    assert_the_stack_gradients(
        nested, RNG.standard_normal((4, 32)), RNG.standard_normal((3, 32, 32)) / 6
    )


def test_a_per_iteration_collective_stays_inside_the_backward_loop():
    """A column-then-row parallel block per iteration: the backward of the row projection's
    input completes its pending sum over tp (Megatron's all-reduce) once per iteration, inside
    the backward loop, and the gradient still equals the unsharded formula."""
    source = """
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((4,), ("tp",))
REPLICATED = ShardLayout(Layout((4, 8)), (B,), TP)

@func
def block(x: Tensor[(4, 8), "f64"], w1s: Tensor[(2, 8, 16 @ TP.tp), "f64"],
          w2s: Tensor[(2, 16 @ TP.tp, 8), "f64"]):
    for layer in range(2):
        h = tf.tanh(x @ w1s[layer])
        x = x + tf.reshard(h @ w2s[layer], layout=REPLICATED, storage="gmem")
    return tf.reduce(x * x, axes=(0, 1), keepdim=False, kind="sum")
"""
    block = parse_source(source, "block.py")["block"]
    gradient = grad(block, argnums=(0, 1, 2))
    verify(gradient)
    x = RNG.standard_normal((4, 8))
    w1s, w2s = RNG.standard_normal((2, 8, 16)) / 3, RNG.standard_normal((2, 16, 8)) / 4
    got = evaluate(gradient, x, w1s, w2s)
    want = _block_gradients(x, w1s, w2s)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
    _, backward = forward_and_backward(gradient)
    body = iter_nodes(backward.body)
    reshards = [n for n in body if isinstance(n, Call) and isinstance(n.target, Reshard)]
    completions = [r for r in reshards if pending_partials(r.args[0].type)]
    assert completions, "the tp all-reduce of the input gradient is inside the backward loop"


def _block_gradients(x, w1s, w2s):
    xs = [x]
    for w1, w2 in zip(w1s, w2s, strict=True):
        xs.append(xs[-1] + np.tanh(xs[-1] @ w1) @ w2)
    back = 2 * xs[-1]
    d1, d2 = np.zeros_like(w1s), np.zeros_like(w2s)
    for layer in reversed(range(2)):
        h = np.tanh(xs[layer] @ w1s[layer])
        d2[layer] = h.T @ back
        dh = (back @ w2s[layer].T) * (1 - h**2)
        d1[layer] = xs[layer].T @ dh
        back = back + dh @ w1s[layer].T
    return back, d1, d2


STEPS = {
    "tanh": "c = tf.tanh(c * {w})",
    "sigmoid": "c = tf.sigmoid(c) + {w}",
    "mul": "c = c * {w} + d",
    "swap": "c, d = d * {w}, c",
    "exp": "d = d + tf.exp(c * 0.3) * {w}",
    "square": "c = c * c * 0.5 + {w}",
}
"""One iteration's update of the carries c, d (shape (5,)); {w} is the stacked weight's window
w[i] or the loop-invariant v."""


@settings(max_examples=12, deadline=None)
@given(
    steps=st.lists(st.sampled_from(sorted(STEPS)), min_size=1, max_size=3),
    reads=st.lists(st.booleans(), min_size=3, max_size=3),
    count=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_random_loops_over_carries_match_central_differences(steps, reads, count, seed):
    """d loss / d (x, y, w, v) of a random loop program over two carries, every input read
    through a window of a stacked weight or directly, against central differences of the
    program itself in float64 (the evaluator, no reverse mode involved)."""
    body = "\n".join(
        "        " + STEPS[step].format(w="w[i]" if read else "v")
        for step, read in zip(steps, reads, strict=False)
    )
    source = f"""
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

@func
def program(x: Tensor[(5,), "f64"], y: Tensor[(5,), "f64"], w: Tensor[({count}, 5), "f64"],
            v: Tensor[(5,), "f64"]):
    c, d = x, y
    for i in range({count}):
{body}
    return tf.reduce(c * d + c, axes=(0,), keepdim=False, kind="sum")
"""
    program = parse_source(source, "random_loop.py")["program"]
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-0.8, 0.8, shape) for shape in ((5,), (5,), (count, 5), (5,))]
    gradient = grad(program, argnums=(0, 1, 2, 3))
    verify(gradient)
    assert_gradients_match_central_differences(
        evaluate(gradient, *arrays), lambda *a: evaluate(program, *a), arrays, (0, 1, 2, 3), source
    )
