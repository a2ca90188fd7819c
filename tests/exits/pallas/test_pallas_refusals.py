# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""What the Pallas exit refuses, located at the op, naming what cannot map (issue 18).

One pallas_call is a grid of independent program instances: nothing a CTA computes reaches
another CTA. So a Partial across CTAs (its addends live in different CTAs; completing it needs a
second pass or atomics), a reduction that completes across CTAs, and a Reshard that gathers
blocks from other CTAs are refused, and so are the meshes the kernel language does not expose
(warp/thread levels), a dynamic grid extent and a 'device' mesh (the SPMD exit's). Inputs are
checked as `evaluate` checks them (DESIGN §3: bad inputs are EvalError).
"""

from pathlib import Path

import numpy as np
import pytest

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.exits.pallas import lower_pallas, run_pallas
from tilefoundry.exits.pallas.grid import find_grid
from tilefoundry.ir.core import Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, f32
from tilefoundry.ir.types.shard import B, Layout, Mesh, P, ShardLayout, Topology, make_mesh

CTAS = make_mesh((2,), ("k",), topology="cta")
WARPS = make_mesh((4,), ("w",), topology="warp")
DEVICES = make_mesh((2,), ("d",))
LAUNCHED = Mesh(Topology("cta", None), Layout((None,), (1,)), ("c",))
WHOLE = ShardLayout(Layout((8, 4)), (B,), CTAS)


@func
def k_split_matmul(a: Tensor[(8, 16 @ CTAS.k), "f32"], b: Tensor[(16 @ CTAS.k, 4), "f32"]):
    partial = a @ b
    return tf.reshard(partial, layout=WHOLE, storage="gmem")


@func
def partial_parameter(x: Tensor[(8, 4, {CTAS.k @ P("sum")}), "f32"]):
    return tf.reshard(x, layout=(8 @ CTAS.k, 4), storage="gmem")


@func
def reduce_over_ctas(x: Tensor[(8 @ CTAS.k, 4), "f32"]):
    return tf.reduce(x, axes=(0,), keepdim=True, kind="sum")


@func
def gather_over_ctas(x: Tensor[(8 @ CTAS.k, 4), "f32"]):
    return tf.reshard(x, layout=WHOLE, storage="gmem")


@func
def on_warps(x: Tensor[(8 @ WARPS.w, 4), "f32"]):
    return tf.relu(x)


@func
def on_devices(x: Tensor[(8 @ DEVICES.d, 4), "f32"]):
    return tf.relu(x)


@func
def scatter_in_kernel(x: Tensor[(8, 16), "f32"], ids: Tensor[(4,), "i32"]):
    return tf.scatter_add(x, ids, x[0:4, :], axis=0)


@func
def sharded_concat(x: Tensor[(8 @ CTAS.k, 4), "f32"]):
    return tf.concat((x, x), axis=1)


@func
def plain(x: Tensor[(8, 4), "f32"]):
    acc = tf.zeros((8, 1), "f32")
    for j in tile(4, 2):
        acc = acc + tf.reduce(x[:, j], axes=(1,), keepdim=True, kind="sum")
    return acc


@func
def wide(x: Tensor[(8, 4), "f64"]):
    return x * 2.0


def _line_of(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if line.strip() == text)


def _arrays(fn):
    return [np.ones([int(d) for d in p.type.shape], p.type.dtype.to_numpy()) for p in fn.params]


def test_a_partial_across_ctas_is_refused_at_the_op_that_makes_it():
    """Issue 18: a Partial across CTAs needs a second pass or atomics; the refusal names the
    MatMul, the mesh axis, and the line `partial = a @ b`."""
    with pytest.raises(UnsupportedError) as caught:
        lower_pallas(k_split_matmul, *_arrays(k_split_matmul))  # before any tracing
    err = caught.value
    assert err.message.startswith("MatMul: its result is Partial(sum) over the CTAs on ")
    assert "second pass or atomics" in err.message and "'k'" in err.message
    assert err.location is not None and err.location.line == _line_of("partial = a @ b")


def test_a_partial_parameter_is_refused_at_the_parameter():
    """A Partial gmem value has no BlockSpec: each CTA would hold one addend of it."""
    with pytest.raises(UnsupportedError) as caught:
        lower_pallas(partial_parameter, np.ones((8, 4), np.float32))
    assert "parameter 'x': is Partial(sum) over the CTAs" in caught.value.message
    assert "second pass or atomics" in caught.value.message
    assert caught.value.location is not None


def test_a_reduction_completing_across_ctas_is_refused():
    with pytest.raises(UnsupportedError, match=r"^Reduce: reduces a dim split over the CTAs"):
        run_pallas(reduce_over_ctas, *_arrays(reduce_over_ctas), interpret=True)


def test_a_reshard_gathering_other_ctas_blocks_is_refused():
    with pytest.raises(UnsupportedError, match=r"^Reshard: gathers logical axis 0.*do not exch"):
        run_pallas(gather_over_ctas, *_arrays(gather_over_ctas), interpret=True)


def test_a_warp_mesh_level_is_refused():
    """DESIGN §4.13: warp/thread topologies are refused by the exits with a clear error."""
    with pytest.raises(UnsupportedError, match=r"topology warp; a Pallas kernel exposes only"):
        lower_pallas(on_warps, *_arrays(on_warps))


def test_a_device_mesh_belongs_to_the_spmd_exit():
    with pytest.raises(UnsupportedError, match=r"'device' mesh.*run_xla\(fn, \*arrays, devices"):
        lower_pallas(on_devices, *_arrays(on_devices))


def test_a_dynamic_grid_extent_is_refused():
    """A launch-provided cta count (seed shard §5, `Topology('cta', None)`) has no fixed grid."""
    layout = ShardLayout(Layout((8, 4)), (B,), LAUNCHED)
    x = Var("x", TensorType((8, 4), f32, layout))
    with pytest.raises(UnsupportedError, match=r"dynamic extent.*fixed when the kernel is built"):
        find_grid(Function("launched", (x,), x, x.type))


def test_an_op_without_a_pallas_rule_is_refused_by_name():
    with pytest.raises(UnsupportedError, match=r"^ScatterAdd: the Pallas exit has no kernel rule"):
        lower_pallas(scatter_in_kernel, *_arrays(scatter_in_kernel))


def test_an_op_with_mesh_semantics_but_no_pallas_sharded_rule_fails_closed():
    with pytest.raises(UnsupportedError, match=r"^Concat: .*no PALLAS_SHARDED rule"):
        lower_pallas(sharded_concat, *_arrays(sharded_concat))


def test_inputs_are_checked_like_evaluate():
    """DESIGN §3: wrong count or dtype is an EvalError naming the parameter, before any jax."""
    with pytest.raises(EvalError, match=r"expected 1 argument\(s\) \(x\), got 2"):
        run_pallas(plain, np.ones((8, 4), np.float32), np.ones((8, 4), np.float32))
    with pytest.raises(EvalError, match=r"parameter 'x' is f32.*got an array of dtype float64"):
        run_pallas(plain, np.ones((8, 4)))
    with pytest.raises(EvalError, match=r"expected a hir Function"):
        run_pallas(lambda x: x, np.ones((8, 4), np.float32))


def test_a_64_bit_parameter_is_refused_rather_than_narrowed():
    with pytest.raises(UnsupportedError, match=r"parameter 'x': is f64.*narrow it silently"):
        run_pallas(wide, np.ones((8, 4), np.float64), interpret=True)


def test_a_windowed_plain_loop_still_runs():
    """The control for the refusals above: the same exit runs the unsharded tile loop."""
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_array_equal(
        run_pallas(plain, x, interpret=True), x.sum(axis=1, keepdims=True)
    )


def test_compiling_without_a_gpu_is_refused_rather_than_failing_in_jax():
    """interpret=False asks for Triton / Mosaic GPU; on a CPU-only jax that is a clear refusal."""
    import jax

    if jax.default_backend() == "gpu":
        pytest.skip("a GPU is present: interpret=False compiles there")
    with pytest.raises(UnsupportedError, match=r"needs a GPU.*default backend is 'cpu'"):
        run_pallas(plain, np.ones((8, 4), np.float32), interpret=False)
