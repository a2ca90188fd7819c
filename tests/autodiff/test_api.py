# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The public surface of reverse mode (DESIGN §3, §4.18; docs/autodiff.md): `grad`,
`value_and_grad` and `vjp` take a Function and return an ordinary typed Function, callable from a
DSL body like any @func, with JAX's conventions for argnums, integer inputs and scalar losses.

Every expected value is an independent numpy formula of the same math, never the transform's own
output."""

from pathlib import Path

import numpy as np
import pytest

import tilefoundry
from tilefoundry import Tensor, VerifyError, func, grad, value_and_grad, vjp
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.hir import Function
from tilefoundry.ir.text import format_ir
from tilefoundry.ir.types.shard import B, Layout, P, ShardLayout, make_mesh
from tilefoundry.passes import compile as compile_pipeline
from tilefoundry.passes import verify

RNG = np.random.default_rng(25)
X = RNG.standard_normal((4, 8))
W = RNG.standard_normal((8, 16)) / 4


@func
def loss(x: Tensor[(4, 8), "f64"], w: Tensor[(8, 16), "f64"]):
    return tf.reduce(tf.tanh(x @ w), axes=(0, 1), keepdim=False, kind="sum")


def loss_gradients(x, w):
    """d/dx and d/dw of sum(tanh(x @ w)), by hand."""
    back = 1.0 - np.tanh(x @ w) ** 2
    return back @ w.T, x.T @ back


def test_the_transforms_are_public():
    assert tilefoundry.grad is grad
    assert tilefoundry.value_and_grad is value_and_grad
    assert tilefoundry.vjp is vjp


def test_grad_returns_an_ordinary_verified_function():
    g = grad(loss, argnums=1)
    assert isinstance(g, Function)
    assert [p.name for p in g.params] == ["x", "w"]
    assert g.return_type == loss.params[1].type
    verify(g)
    np.testing.assert_allclose(evaluate(g, X, W), loss_gradients(X, W)[1], rtol=1e-12)


def test_grad_with_a_tuple_of_argnums_returns_a_tuple():
    gx, gw = evaluate(grad(loss, argnums=(0, 1)), X, W)
    want_x, want_w = loss_gradients(X, W)
    np.testing.assert_allclose(gx, want_x, rtol=1e-12)
    np.testing.assert_allclose(gw, want_w, rtol=1e-12)


def test_value_and_grad_shares_the_forward_program():
    value, (_, gw) = evaluate(value_and_grad(loss, argnums=(0, 1)), X, W)
    np.testing.assert_allclose(value, np.tanh(X @ W).sum(), rtol=1e-12)
    np.testing.assert_allclose(gw, loss_gradients(X, W)[1], rtol=1e-12)
    # one forward matmul feeds both the value and the backward program
    text = format_ir(value_and_grad(loss, argnums=(0, 1)))
    assert text.count("matmul(%x, %w)") == 1


def test_vjp_takes_the_output_cotangent_and_returns_outputs_and_cotangents():
    @func
    def layer(x: Tensor[(4, 8), "f64"], w: Tensor[(8, 16), "f64"]):
        return tf.tanh(x @ w)

    f = vjp(layer)
    assert [p.name for p in f.params] == ["x", "w", "d_out"]
    ct = RNG.standard_normal((4, 16))
    out, (dx, dw) = evaluate(f, X, W, ct)
    back = ct * (1.0 - np.tanh(X @ W) ** 2)
    np.testing.assert_allclose(out, np.tanh(X @ W), rtol=1e-12)
    np.testing.assert_allclose(dx, back @ W.T, rtol=1e-12)
    np.testing.assert_allclose(dw, X.T @ back, rtol=1e-12)


def test_the_gradient_is_callable_from_a_dsl_body():
    """The brief's spelling: `loss, (g1, g2) = value_and_grad(loss_fn, argnums=(1, 2))(...)`."""

    @func
    def step(x: Tensor[(4, 8), "f64"], w: Tensor[(8, 16), "f64"]):
        value, (_, gw) = value_and_grad(loss, argnums=(0, 1))(x, w)
        return value, w - gw * 0.1

    value, updated = evaluate(step, X, W)
    np.testing.assert_allclose(value, np.tanh(X @ W).sum(), rtol=1e-12)
    np.testing.assert_allclose(updated, W - 0.1 * loss_gradients(X, W)[1], rtol=1e-12)


def test_a_called_function_is_differentiated_per_call_site():
    @func
    def scale(a: Tensor[(4, 8), "f64"], b: Tensor[(4, 8), "f64"]):
        return a * b

    @func
    def twice(x: Tensor[(4, 8), "f64"], y: Tensor[(4, 8), "f64"]):
        return tf.reduce(scale(x, y) + scale(x, x), axes=(0, 1), keepdim=False, kind="sum")

    y = RNG.standard_normal((4, 8))
    gx, gy = evaluate(grad(twice, argnums=(0, 1)), X, y)
    np.testing.assert_allclose(gx, y + 2 * X, rtol=1e-12)
    np.testing.assert_allclose(gy, X, rtol=1e-12)


def test_integer_inputs_get_no_cotangent_and_cannot_be_named():
    @func
    def masked(x: Tensor[(8,), "f64"], keep: Tensor[(8,), "i32"]):
        kept = tf.where(keep > np.int32(0), x * x, 0.0)
        return tf.reduce(kept, axes=(0,), keepdim=False, kind="sum")

    keep = np.array([1, 0, 1, 1, 0, 0, 1, 0], np.int32)
    x = RNG.standard_normal(8)
    np.testing.assert_allclose(evaluate(grad(masked), x, keep), 2 * x * (keep > 0), rtol=1e-12)
    with pytest.raises(VerifyError, match=r"parameter 'keep' .* i32.* has no cotangent") as err:
        grad(masked, argnums=1)
    assert "test_api.py" in str(err.value)  # located at the function
    (only,) = evaluate(vjp(masked), x, keep, np.float64(1.0))[1]  # vjp: float inputs only
    np.testing.assert_allclose(only, 2 * x * (keep > 0), rtol=1e-12)


def test_grad_needs_a_rank_0_float_output():
    @func
    def vector(x: Tensor[(4, 8), "f64"]):
        return x * 2.0

    with pytest.raises(VerifyError, match="differentiates a rank-0 float"):
        grad(vector)


@pytest.mark.parametrize("argnums", [2, (0, 0), "w", -3])
def test_bad_argnums_are_refused(argnums):
    with pytest.raises(VerifyError, match="argnums"):
        grad(loss, argnums=argnums)


def test_a_parameter_that_does_not_reach_the_output_has_a_zero_gradient():
    @func
    def ignores(x: Tensor[(4, 8), "f64"], w: Tensor[(8, 16), "f64"]):
        return tf.reduce(x, axes=(0, 1), keepdim=False, kind="sum")

    gx, gw = evaluate(grad(ignores, argnums=(0, 1)), X, W)
    np.testing.assert_array_equal(gx, np.ones_like(X))
    np.testing.assert_array_equal(gw, np.zeros_like(W))


QUAD = make_mesh((4,), ("q",))


def test_an_op_without_a_rule_is_refused_up_front_at_its_line():
    """Local is the one op left without a rule (tests/autodiff/test_vjp_coverage.py)."""

    @func
    def per_device(x: Tensor[(8 @ QUAD.q,), "f64"]):
        mine = tf.local(x)
        return tf.reduce(mine, axes=(0,), keepdim=False, kind="sum")

    with pytest.raises(UnsupportedError, match=r"Local: reverse-mode .* no VJP rule") as err:
        grad(per_device)
    assert "test_api.py" in str(err.value)


def test_a_compiled_program_is_differentiated_before_compile_not_after():
    fused = compile_pipeline(loss)[0]
    with pytest.raises(UnsupportedError, match=r"FusionRegion: .* before `compile`"):
        grad(fused)
    gradient, _ = compile_pipeline(grad(loss, argnums=1))
    np.testing.assert_allclose(evaluate(gradient, X, W), loss_gradients(X, W)[1], rtol=1e-12)


def test_a_refused_transform_in_a_dsl_body_points_at_the_call():
    with pytest.raises(VerifyError, match="argnums") as err:

        @func
        def step(x: Tensor[(4, 8), "f64"], w: Tensor[(8, 16), "f64"]):
            return grad(loss, argnums=5)(x, w)

    source = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "argnums=5)(x" in text)
    assert f"test_api.py:{line}:" in str(err.value)


def test_the_worked_example_communicates_only_what_its_types_say():
    """docs/autodiff.md's worked example: `show` lists two all-reduces, the forward's and the
    input gradient's (Megatron's f); the weight gradients are split as the weights."""
    from tilefoundry.exits.stablehlo.spmd import lower_spmd_or_none
    from tilefoundry.frontend import parse_source
    from tilefoundry.inspect.shard_view import value_rows

    path = Path(__file__).resolve().parents[2] / "examples" / "megatron_grad.py"
    step = parse_source(path.read_text(), str(path))["train_step"]
    verify(step)
    rows = value_rows(step, lower_spmd_or_none(step))
    collectives = [row.collectives for row in rows if row.collectives]
    assert collectives == [("tp: all-reduce(sum)",)] * 2
    _, d_w1, d_w2 = step.return_type.fields[1].fields
    assert d_w1 == step.params[1].type and d_w2 == step.params[2].type


def test_differentiating_through_a_pending_max_is_refused_at_its_line():
    """DESIGN §4.18: a Partial(max) value has no cotangent state until it is completed."""
    mesh = make_mesh((4,), ("x",))
    replicated = ShardLayout(Layout((8,)), (B,), mesh)

    @func
    def completes_a_max(v: Tensor[(8, {mesh.x @ P("max")}), "f64"]):
        whole = tf.reshard(v, layout=replicated, storage="gmem")
        return tf.reduce(whole, axes=(0,), keepdim=False, kind="sum")

    with pytest.raises(UnsupportedError, match=r"Partial\(max\) .* complete it first") as err:
        grad(completes_a_max)
    assert "test_api.py" in str(err.value)


def test_a_gradient_called_with_other_types_is_derived_at_that_call_site():
    """A parameter annotated plain called with a split activation: the gradient is derived for
    the program that call runs, so dW (a pending sum over the split batch) is completed into
    w's type, and the update `w - g` types."""
    mesh = make_mesh((4,), ("x",))

    @func
    def plain_loss(x: Tensor[(8, 4), "f32"], w: Tensor[(4, 4), "f32"]):
        return tf.reduce(tf.tanh(x @ w), axes=(0, 1), keepdim=False, kind="sum")

    dw = grad(plain_loss, argnums=1)

    @func
    def step(x: Tensor[(8 @ mesh.x, 4), "f32"], w: Tensor[(4, 4), "f32"]):
        return w - dw(x, w) * 0.1

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((8, 4)).astype(np.float32), np.eye(4, dtype=np.float32)
    want = w - 0.1 * x.T @ (1 - np.tanh(x @ w) ** 2)
    np.testing.assert_allclose(evaluate(step, x, w), want, rtol=1e-5, atol=1e-6)


def test_vjp_takes_no_cotangent_for_an_integer_output():
    @func
    def both(x: Tensor[(8,), "f64"]):
        return x * 3.0, tf.cast(x, "i32")

    f = vjp(both)
    assert [p.name for p in f.params] == ["x", "d_out0"]
    x, ct = RNG.standard_normal(8), RNG.standard_normal(8)
    (doubled, truncated), (dx,) = evaluate(f, x, ct)
    np.testing.assert_allclose(doubled, 3 * x)
    np.testing.assert_array_equal(truncated, x.astype(np.int32))
    np.testing.assert_allclose(dx, 3 * ct)
