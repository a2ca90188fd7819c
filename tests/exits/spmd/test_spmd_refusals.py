# ruff: noqa: F821
"""What the SPMD exit refuses, each with a message that says why and what to do instead."""

import numpy as np
import pytest

from exits.spmd import spmd_worker
from exits.spmd.sharded_programs import TP
from frontend import programs as frontend_programs
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import emit_spmd
from tilefoundry.frontend import Tensor, func, parse_source
from tilefoundry.ir.types.shard import make_mesh

CTA = make_mesh((4,), ("c",), topology="cta")
WARP = make_mesh((2, 2), ("a", "b"), topology="warp")


@func
def on_ctas(x: Tensor[(16 @ CTA.c, 8), "f32"]):
    return tf.relu(x)


@func
def on_warps(x: Tensor[(16 @ WARP.a, 8 @ WARP.b), "f32"]):
    return tf.relu(x)


@func
def partial_result(x: Tensor[(8, 16 @ TP.tp), "f32"], w: Tensor[(16 @ TP.tp, 4), "f32"]):
    return x @ w


@func
def local_result(x: Tensor[(16 @ TP.tp, 8), "f32"]):
    return tf.local(x)


P23 = make_mesh((2, 3), ("p", "q"))
P32 = make_mesh((3, 2), ("r", "s"))


@func
def unnested_views(x: Tensor[(12 @ P23.p, 6), "f32"], y: Tensor[(12 @ P32.r, 6), "f32"]):
    return tf.relu(x), tf.relu(y)


@func
def unsharded(x: Tensor[(16, 8), "f32"]):
    return tf.relu(x)


@pytest.mark.parametrize("fn, topology", [(on_ctas, "cta"), (on_warps, "warp")])
def test_non_device_topologies_are_refused(fn, topology):
    with pytest.raises(UnsupportedError, match=f"runs on the {topology} topology.*only 'device'"):
        emit_spmd(fn)


def test_a_partial_parameter_takes_its_addend_of_the_global_value(devices8):
    """Issue 28 item 2: a Partial(sum) parameter runs (it is not refused mid-lowering). The caller
    passes the global value, as to `evaluate`; each device takes an addend of it, so the
    completing Reshard gives the value back, as the simulator's uneven addends do."""
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    text = emit_spmd(frontend_programs.partial_signature)
    assert text.count('"stablehlo.all_reduce"') == 1
    got = devices8.submit(
        spmd_worker.run_named, "frontend.programs", "partial_signature", (x,), 8
    ).result(timeout=120)
    np.testing.assert_allclose(np.asarray(got), x, rtol=1e-6)
    np.testing.assert_allclose(evaluate(frontend_programs.partial_signature, x), x, rtol=1e-5)


def test_a_partial_result_is_completed_at_the_boundary(devices8):
    """Issue 28 item 2: a Partial(sum) result returns its global value, the completed sum
    (`evaluate(..., complete_partials=True)`), by one all-reduce the exit adds."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 4)).astype(np.float32)
    assert emit_spmd(partial_result).count('"stablehlo.all_reduce"') == 1
    got = devices8.submit(
        spmd_worker.run_named, "exits.spmd.test_spmd_refusals", "partial_result", (x, w), 8
    ).result(timeout=120)
    want = x.astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        evaluate(partial_result, x, w, complete_partials=True), want, rtol=1e-5, atol=1e-5
    )


def test_a_local_result_has_no_global_value():
    with pytest.raises(UnsupportedError, match=r"per-device \(Local\) value"):
        emit_spmd(local_result)


def test_views_without_a_common_refinement_are_refused_up_front_naming_both():
    """Issue 15 item 6: meshes over one device set run together only when their axes nest;
    (2, 3) and (3, 2) do not, so the exit refuses a program holding both, naming both meshes.
    A Reshard from one to the other (which the simulator cannot run either) is refused when it
    is typed (issue 28: "a reshard onto another mesh passes `check` and both backends then
    refuse it")."""
    with pytest.raises(UnsupportedError, match="have no common refinement") as caught:
        emit_spmd(unnested_views)
    with pytest.raises(VerifyError, match="have no common refinement") as typed:
        parse_source(
            "from tilefoundry import Tensor, func\nfrom tilefoundry.dsl import tf\n\n"
            '@func\ndef f(x: Tensor[(12 @ P23.p, 6), "f32"]):\n'
            '    return tf.reshard(x, layout=(12 @ P32.r, 6), storage="gmem")\n',
            "views.py",
            {"P23": P23, "P32": P32},
        )
    for refused in (caught.value, typed.value):
        assert "p=2, q=3" in refused.message and "r=3, s=2" in refused.message


def test_an_unsharded_function_belongs_to_the_single_device_exit():
    with pytest.raises(UnsupportedError, match="has no sharded values"):
        emit_spmd(unsharded)


def test_run_xla_refuses_a_device_count_other_than_the_mesh(devices8):
    arrays = (
        np.ones((8, 32), np.float32),
        np.ones((32, 64), np.float32),
        np.ones((64, 32), np.float32),
    )
    message = devices8.submit(spmd_worker.run_error, "megatron_mlp", arrays, 4).result(timeout=120)
    assert message.startswith("UnsupportedError: run_xla: megatron_mlp runs on a mesh of 8 devices")


def test_run_xla_without_devices_runs_on_the_meshs_device_count(devices8):
    """Issue 28 item 2: `run_xla(fn)` of a sharded program takes the mesh's device count (before,
    a raw JaxRuntimeError from the one-device path); a process with fewer devices is refused
    with an UnsupportedError naming the XLA_FLAGS fix."""
    from exits.spmd.sharded_programs import PROGRAMS
    from tilefoundry.exits.runtimes.xla import run_xla

    rng = np.random.default_rng(5)
    arrays = tuple(
        rng.standard_normal(shape).astype(np.float32) for shape in ((8, 32), (32, 64), (64, 32))
    )
    default = devices8.submit(spmd_worker.run_program, "megatron_mlp", arrays, None)
    eight = devices8.submit(spmd_worker.run_program, "megatron_mlp", arrays, 8)
    np.testing.assert_array_equal(default.result(timeout=120), eight.result(timeout=120))
    import jax

    if len(jax.devices("cpu")) < 8:
        with pytest.raises(UnsupportedError, match=r"needs 8 devices but XLA has .*XLA_FLAGS="):
            run_xla(PROGRAMS["megatron_mlp"].sharded, *arrays)
    else:  # the test process itself was started with 8 devices: it runs
        np.testing.assert_array_equal(
            run_xla(PROGRAMS["megatron_mlp"].sharded, *arrays), eight.result(timeout=120)
        )


def test_the_worker_really_has_eight_devices(devices8):
    assert devices8.submit(spmd_worker.device_count).result(timeout=120) == 8
