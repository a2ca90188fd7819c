# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The tile kernels of examples/ end to end (issue 17 "Done when"; DESIGN §4.13, §4.14, §6).

Each example passes `check` (strict verify), runs on the simulator (`evaluate`; flash attention
on its cta mesh), compiles with fusion inside the loop body, emits StableHLO with one `while`
and a `dynamic_slice`, runs on XLA (a cta-mesh program as its unsharded meaning: its CTAs share
one device, DESIGN §4.13), and equals an independent numpy reference at f32 rel 1e-5.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import FusionRegion, GridRegionExpr
from tilefoundry.passes import compile, verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RNG = np.random.default_rng(1717)
RTOL = 1e-5  # f32 rel 1e-5
ATOL = 64 * 2.0**-24  # for entries near 0: an f32 sum of 64 unit-scale products (the tiled
# matmul's contraction) is off by up to about 64 ulp(1) absolutely


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _normal(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _tiled_matmul():
    a, b = _normal(16, 64), _normal(64, 16)
    return (a, b), a.astype(np.float64) @ b


def _online_softmax():
    x = _normal(8, 64) * 4
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (x,), e / e.sum(axis=1, keepdims=True)


def _flash_attention():
    q, k, v = _normal(32, 16), _normal(64, 16), _normal(64, 16)
    scores = (q.astype(np.float64) @ k.T) / np.sqrt(16)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (q, k, v), (p / p.sum(axis=1, keepdims=True)) @ v


CASES = {
    "tiled_matmul": _tiled_matmul,
    "online_softmax": _online_softmax,
    "flash_attention": _flash_attention,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def kernel(request):
    fn = _example(request.param)
    args, expected = CASES[request.param]()
    return request.param, fn, args, expected


def test_passes_check(kernel):
    _, fn, _, _ = kernel
    verify(fn)


def test_runs_on_the_simulator(kernel):
    _, fn, args, expected = kernel
    np.testing.assert_allclose(evaluate(fn, *args), expected, rtol=RTOL, atol=ATOL)


def _loops(fn):
    return [n for n in iter_nodes(fn.body) if isinstance(n, GridRegionExpr)]


def test_compiles_with_fusion_inside_the_loop(kernel):
    """DESIGN §6: a loop body's per-iteration ops fuse by the ordinary rules; verify runs after."""
    _, fn, args, expected = kernel
    fused, report = compile(fn)
    (loop,) = _loops(fused)
    inside = [
        n
        for n in iter_nodes(loop.body)
        if isinstance(n, Call) and isinstance(n.target, FusionRegion)
    ]
    assert inside, str(report)
    np.testing.assert_allclose(evaluate(fused, *args), expected, rtol=RTOL, atol=ATOL)


def test_emits_one_while_with_dynamic_slices(kernel):
    _, fn, _, _ = kernel
    text = emit_stablehlo(compile(fn)[0])
    assert text.count('"stablehlo.while"') == 1
    assert '"stablehlo.dynamic_slice"' in text
    assert "gather" not in text


def test_runs_on_xla(kernel):
    _, fn, args, expected = kernel
    got = run_xla(compile(fn)[0], *args)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=RTOL, atol=ATOL)


def test_a_window_write_lowers_to_dynamic_update_slice():
    """DESIGN §4.14 windowed writes -> `dynamic_update_slice`, run on XLA."""
    from tilefoundry import Tensor, func, tile
    from tilefoundry.dsl import tf

    @func
    def tiled_exp(x: Tensor[(4, 16), "f32"]):
        out = tf.zeros((4, 16), "f32")
        for i in tile(16, 4):
            out[:, i] = tf.exp(x[:, i])
        return out

    x = _normal(4, 16)
    fused = compile(tiled_exp)[0]
    assert '"stablehlo.dynamic_update_slice"' in emit_stablehlo(fused)
    np.testing.assert_allclose(np.asarray(run_xla(fused, x)), np.exp(x), rtol=RTOL)


def test_an_unprovable_window_is_clamped_alike_on_the_simulator_and_xla():
    """DESIGN §4.14: a window the frontend cannot prove in range (a symbolic loop bound) has one
    behaviour everywhere: its start is clamped into [0, extent - size], as StableHLO does. With
    N = 10 and tile(N, 4) the last window [8, 12) reads [6, 10)."""
    from tilefoundry import DimVar, Tensor, func, tile
    from tilefoundry.dsl import tf

    n = DimVar("N", 4, 65)

    @func
    def tile_sum(x: Tensor[(n,), "f32"]):
        acc = tf.zeros((4,), "f32")
        for i in tile(x.shape[0], 4):
            acc = acc + x[i]
        return acc

    x = _normal(10)
    expected = x[0:4] + x[4:8] + x[6:10]
    np.testing.assert_allclose(evaluate(tile_sum, x), expected, rtol=RTOL)
    np.testing.assert_allclose(np.asarray(run_xla(tile_sum, x)), expected, rtol=RTOL)


def test_staging_a_plain_value_is_a_copy_and_a_no_op_at_xla():
    """hir Reshard stride resolution: `reshard(x, layout=Layout(shape), storage="smem")` of a
    plain value is the sugar (DESIGN §4.15), high -> low: C-order over the shape with size-1 -> 0.
    The simulator copies, StableHLO emits nothing (a row-major layout is no physical change)."""
    from tilefoundry import Tensor, func
    from tilefoundry.dsl import tf
    from tilefoundry.ir.types.shard import Layout

    @func
    def staged(x: Tensor[(4, 1, 4), "f32"]):
        return tf.reshard(x, layout=Layout((4, 1, 4)), storage="smem")

    x = _normal(4, 1, 4)
    got = evaluate(staged, x)
    np.testing.assert_array_equal(got, x)
    assert got is not x
    assert staged.return_type.storage.name == "SMEM"
    assert staged.return_type.layout == Layout((4, 1, 4), (4, 0, 1))
    text = emit_stablehlo(staged)
    assert "return %arg0" in text
    np.testing.assert_array_equal(np.asarray(run_xla(staged, x)), x)


def test_staging_without_a_layout_is_refused_naming_the_sugar():
    """hir Reshard stride resolution: "layout=None, storage changed -> error; a storage change
    MUST carry an explicit layout=" (DESIGN §4.15: for a plain value too), located."""
    from tilefoundry import Tensor, func
    from tilefoundry.dsl import tf

    with pytest.raises(VerifyError, match=r'layout=Layout\(\(4, 4\)\), storage="smem"\)') as err:

        @func
        def staged(x: Tensor[(4, 4), "f32"]):
            return tf.reshard(x, storage="smem")

    assert "test_tile_programs.py" in str(err.value)


def test_a_dsl_reshard_to_another_shape_is_refused_located_naming_both_shapes():
    """Shard §7.4 (DESIGN §4.17): the random-program case that found it, (8, 16) resharded to
    the same 128 elements laid out as (16, 8), written in the DSL: refused at its source line."""
    from tilefoundry import Tensor, func
    from tilefoundry.dsl import tf
    from tilefoundry.ir.types.shard import make_mesh

    mesh = make_mesh((2, 4), ("x", "y"))
    # (16 @ x, 8) is laid out as positions (2, 8, 8): x's 8 rows cannot be its first 16
    both = r"the target layout's shape \(2, 8, 8\) does not factor x's logical shape \(8, 16\)"
    with pytest.raises(VerifyError, match=both) as caught:

        @func
        def other_shape(x: Tensor[(8, 16), "f32"]):
            return tf.reshard(x, layout=(16 @ mesh.x, 8), storage="gmem")

    assert f"{__file__}:" in str(caught.value)
