# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""`checkpoint(fn)` (issue 26 item 4; docs/autodiff.md "Remat"; JAX's `jax.checkpoint` is the
anchor): the backward recomputes fn's forward at each call site it differentiates instead of
keeping fn's intermediates alive. The gradient is bit-equal to the unmarked one (the same
operations on the same operands), the forward keeps the calls as calls, and the per-device peak
(`footprint.peak_bytes_per_device`) drops by the activations no longer kept.
"""

import re

import numpy as np
import pytest

from tilefoundry import Tensor, VerifyError, checkpoint, func, grad
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.core import Call
from tilefoundry.ir.hir import Function, GridRegionExpr
from tilefoundry.ir.hir.footprint import device_bytes, peak_bytes_per_device
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.walk import iter_nodes
from tilefoundry.passes import verify

RNG = np.random.default_rng(264)
X = RNG.standard_normal((256, 8)).astype(np.float32)
WS = (RNG.standard_normal((4, 8, 8)) / 3).astype(np.float32)


@func
def layer(x: Tensor[(256, 8), "f32"], w: Tensor[(8, 8), "f32"]):
    return tf.tanh(tf.tanh(x @ w) @ w)


recomputed = checkpoint(layer)


@func
def kept_stack(x: Tensor[(256, 8), "f32"], ws: Tensor[(4, 8, 8), "f32"]):
    out = layer(layer(layer(layer(x, ws[0]), ws[1]), ws[2]), ws[3])
    return tf.reduce(out, axes=(0, 1), keepdim=False, kind="sum")


@func
def remat_stack(x: Tensor[(256, 8), "f32"], ws: Tensor[(4, 8, 8), "f32"]):
    out = recomputed(recomputed(recomputed(recomputed(x, ws[0]), ws[1]), ws[2]), ws[3])
    return tf.reduce(out, axes=(0, 1), keepdim=False, kind="sum")


@func
def kept_loop(x: Tensor[(256, 8), "f32"], ws: Tensor[(4, 8, 8), "f32"]):
    for i in range(4):
        x = layer(x, ws[i])
    return tf.reduce(x, axes=(0, 1), keepdim=False, kind="sum")


@func
def remat_loop(x: Tensor[(256, 8), "f32"], ws: Tensor[(4, 8, 8), "f32"]):
    for i in range(4):
        x = checkpoint(layer)(x, ws[i])
    return tf.reduce(x, axes=(0, 1), keepdim=False, kind="sum")


def calls_of(fn: Function, target_name: str) -> list[Call]:
    return [
        n
        for n in iter_nodes(fn.body)
        if isinstance(n, Call) and isinstance(n.target, Function) and n.target.name == target_name
    ]


@pytest.mark.parametrize(("kept", "remat"), [(kept_stack, remat_stack), (kept_loop, remat_loop)])
def test_the_gradient_is_bit_equal_to_the_unmarked_one(kept, remat):
    want = evaluate(grad(kept, argnums=(0, 1)), X, WS)
    gradient = grad(remat, argnums=(0, 1))
    verify(gradient)
    for g, w in zip(evaluate(gradient, X, WS), want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_the_forward_keeps_the_calls_and_the_backward_recomputes_their_bodies():
    """Layers 1-3 stay calls in the forward (their intermediates die when each returns; layer
    4's forward value is read by no rule, so only its recompute runs); the backward recomputes
    each layer's body: 2 matmuls per layer run again for layers 1-3, on top of the unmarked
    gradient's (8 forward, 16 in the rules)."""
    gradient, kept = grad(remat_stack, argnums=(0, 1)), grad(kept_stack, argnums=(0, 1))
    calls = calls_of(gradient, "checkpoint_layer")
    assert len(calls) == 3 and calls_of(kept, "checkpoint_layer") == []

    def matmuls(root) -> int:
        return sum(isinstance(n, Call) and isinstance(n.target, MatMul) for n in iter_nodes(root))

    assert matmuls(kept.body) == 8 + 16
    assert matmuls(gradient.body) + len(calls) * matmuls(calls[0].target.body) == 8 + 16 + 3 * 2


def deep_stack(layers: int, marked: bool, looped: bool = False) -> Function:
    """sum(layer(... layer(x, ws[0]) ..., ws[layers - 1])), through `checkpoint(layer)` when
    `marked`; written as a loop over the layers when `looped`."""
    name = "checkpoint(layer)" if marked else "layer"
    out = "x"
    for index in range(layers):
        out = f"{name}({out}, ws[{index}])"
    if looped:
        loop = f"for i in range({layers}):\n        x = {name}(x, ws[i])\n    "
        out = "x"
    source = f"""
from tilefoundry import Tensor, checkpoint, func
from tilefoundry.dsl import tf

@func
def layer(x: Tensor[(256, 8), "f32"], w: Tensor[(8, 8), "f32"]):
    return tf.tanh(tf.tanh(x @ w) @ w)

@func
def entry(x: Tensor[(256, 8), "f32"], ws: Tensor[({layers}, 8, 8), "f32"]):
    {loop if looped else ""}return tf.reduce({out}, axes=(0, 1), keepdim=False, kind="sum")
"""
    return parse_source(source, "deep_stack.py")["entry"]


def test_the_peak_drops_by_about_one_activation_per_layer():
    """Unmarked, the backward keeps each layer's inner tanh from the forward until it reaches
    that layer; marked, only the layers' inputs are kept and one layer's inner values are
    recomputed at a time: 8 more layers save about 8 more activations."""
    activation = device_bytes(layer.params[0].type, {})

    def saving(layers: int) -> int:
        kept, marked = (
            peak_bytes_per_device(grad(deep_stack(layers, m), argnums=(0, 1)))
            for m in (False, True)
        )
        return kept - marked

    shallow, deep = saving(8), saving(16)
    assert shallow >= 4 * activation
    assert deep - shallow >= 7 * activation


def test_in_a_loop_only_the_calls_arguments_are_stacked():
    """As `jax.checkpoint` around a scan's body: the forward loop stacks each iteration's input
    x (4 x 256 x 8) and nothing of the layer's inside; unmarked, it stacks the layer's inner
    activations too."""

    def stacks(fn):
        loops = [n for n in iter_nodes(fn.body) if isinstance(n, GridRegionExpr)]
        (forward,) = [loop for loop in loops if loop.init_args[0] is fn.params[0]]
        return sorted(tuple(c.type.shape) for c in forward.carried_args[1:])

    remat, kept = grad(remat_loop, argnums=(0, 1)), grad(kept_loop, argnums=(0, 1))
    assert stacks(remat) == [(4, 256, 8)]
    assert len(stacks(kept)) > 1 and set(stacks(kept)) == {(4, 256, 8)}
    assert peak_bytes_per_device(remat) < peak_bytes_per_device(kept)


def test_checkpoint_marks_a_function_and_refuses_anything_else():
    assert checkpoint(recomputed) is recomputed
    assert recomputed.params == layer.params and recomputed.body is layer.body
    with pytest.raises(VerifyError, match="checkpoint: marks a @func Function"):
        checkpoint(lambda x: x)


def compiled_on_xla(fn: Function, *arrays: np.ndarray):
    """(XLA's temp bytes, tanh ops, dot ops in the compiled HLO, the results) of `fn`."""
    import tilefoundry

    step = tilefoundry.jit(fn)
    compiled = step.compiled(*arrays)
    hlo = compiled.as_text()
    results = [np.asarray(r) for r in step(*arrays)]
    temp = compiled.memory_analysis().temp_size_in_bytes
    return temp, len(re.findall(r" tanh\(", hlo)), len(re.findall(r" dot\(", hlo)), results


def test_xla_keeps_the_recomputation_apart_from_the_forward():
    """The recomputed body reads the call's arguments through an optimization barrier (with the
    arriving cotangent), so XLA's CSE cannot merge it back into the forward: without it the
    compiled marked and unmarked gradients were the same program (8 tanh, 24 dots)."""
    pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")
    kept = compiled_on_xla(grad(kept_stack, argnums=(0, 1)), X, WS)
    marked = compiled_on_xla(grad(remat_stack, argnums=(0, 1)), X, WS)
    assert marked[1] > kept[1]
    for g, w in zip(marked[3], kept[3], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_xla_needs_less_temporary_memory_for_a_checkpointed_stack_of_layers():
    """16 layers as a loop: unmarked, the forward loop stacks every layer's inner activations for
    the backward; checkpointed, only each layer's input, and the backward loop recomputes the
    layer's body (2 more tanh and 2 more dots in the compiled loop bodies). XLA's own memory
    analysis shows the saving the estimate predicts; the gradients agree within rounding."""
    pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")
    layers = 16
    ws = (np.random.default_rng(265).standard_normal((layers, 8, 8)) / 3).astype(np.float32)
    kept_fn, marked_fn = (
        grad(deep_stack(layers, m, looped=True), argnums=(0, 1)) for m in (False, True)
    )
    assert peak_bytes_per_device(marked_fn) < peak_bytes_per_device(kept_fn)
    kept, marked = compiled_on_xla(kept_fn, X, ws), compiled_on_xla(marked_fn, X, ws)
    activation = device_bytes(layer.params[0].type, {})
    assert kept[0] - marked[0] >= layers * activation
    assert marked[1] > kept[1] and marked[2] > kept[2]
    for g, w in zip(marked[3], kept[3], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
