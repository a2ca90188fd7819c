"""Micro-batch accumulation with pending gradients (issue 26 item 3).

The gradient carried through a loop over micro-batches in its pending form, `Partial(sum)` over
the data axis, starts as a pending zero (`tf.zeros(..., layout=<Partial(sum)>)`: every addend
zero), type-checks as a loop carry, runs on the simulator, on 8 XLA devices and through the SPMD
exit, and is completed once after the loop. Counted in XLA's compiled HLO: one all-reduce per
weight per step, outside the loop; the same step reducing inside the loop all-reduces each
weight once per micro-batch (4x). The plans that mix the two are refused, located.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import collective_report
from tilefoundry.frontend import parse_source
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.hir.walk import iter_nodes
from tilefoundry.ir.types import f32, make_shard_tensor_type
from tilefoundry.ir.types.shard import P, S, make_mesh
from tilefoundry.passes import verify
from train import accumulation_programs as programs

WEIGHT_BYTES = sorted(4 * int(np.prod(shape)) for shape in programs.WEIGHTS)
TIMEOUT_S = 600
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _loop(fn) -> GridRegionExpr:
    (loop,) = [n for n in iter_nodes(fn.body) if isinstance(n, GridRegionExpr)]
    return loop


def test_the_pending_carry_type_checks_as_partial_sum_over_dp():
    verify(programs.pending_step)
    for carry in _loop(programs.pending_step).carried_args:
        assert carry.type.layout.attrs == (P("sum"),), carry.name


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_the_simulated_step_equals_the_float64_reference(name):
    arrays = programs.inputs()
    got = evaluate(programs.PROGRAMS[name], *arrays)
    for g, want in zip(got, programs.numpy_step(*arrays), strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_the_spmd_exit_completes_each_weight_once_after_the_loop():
    """One all-reduce per weight, emitted once and run once; reducing inside the loop instead
    runs each MICRO times (4x the collectives and the bytes)."""
    pending = collective_report(programs.pending_step)
    reduced = collective_report(programs.reduced_step)
    assert [(e.kind, e.mesh_axes, e.count, e.emitted) for e in pending] == [
        ("all_reduce", "dp", 2, 2)
    ]
    assert [(e.kind, e.mesh_axes, e.count, e.emitted) for e in reduced] == [
        ("all_reduce", "dp", 2 * programs.MICRO, 2)
    ]
    sent = [sum(e.count * e.bytes_per_device for e in r) for r in (pending, reduced)]
    assert sent == [sum(WEIGHT_BYTES), programs.MICRO * sum(WEIGHT_BYTES)]


_MIXED = """
@func
def {name}(
    x: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    y: Tensor[(MICRO, BATCH @ DP.dp, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN), "f32"],
    w2: Tensor[(HIDDEN, MODEL), "f32"],
):
    g1 = {start}
    for i in range(MICRO):
        d1, d2 = {gradients}(x[i], y[i], w1, w2)
        g1 = g1 + d1
    return g1
"""


@pytest.mark.parametrize(
    ("start", "gradients", "pending_operand"),
    [
        # a complete zero cannot take pending addends: sum(x) + b != sum(x + b)
        ('tf.zeros((MODEL, HIDDEN), "f32")', "pending_gradients", "rhs"),
        # a pending carry cannot take complete gradients (each device would add all of it)
        ('tf.zeros((MODEL, HIDDEN), "f32", layout=PENDING_1)', "reduced_gradients", "lhs"),
    ],
)
def test_a_carry_mixing_pending_and_complete_gradients_is_refused_at_the_add(
    start, gradients, pending_operand
):
    """hir math Binary: add of a pending sum and a complete value is refused."""
    namespace = {**vars(programs), "Tensor": Tensor, "func": func, "tf": tf}
    source = _MIXED.format(name="mixed", start=start, gradients=gradients)
    with pytest.raises(VerifyError) as caught:
        parse_source(source, "<mixed>", namespace)
    assert caught.value.message.startswith(f"Binary: operand '{pending_operand}' carries Partial")
    assert caught.value.location.line == source.splitlines().index("        g1 = g1 + d1") + 1


# -- the Pallas exit: a CTA's block of zeros; a pending zero over CTAs is refused -------------

CTAS = make_mesh((2,), ("k",), topology="cta")
ROWS_SPLIT = make_shard_tensor_type((8, 1), f32, mesh=CTAS, attrs=(S(0),)).layout
PENDING_OVER_CTAS = make_shard_tensor_type((8, 1), f32, mesh=CTAS, attrs=(P("sum"),)).layout


@func
def row_sums(x: Tensor[(8 @ CTAS.k, 4), "f32"]):
    acc = tf.zeros((8, 1), "f32", layout=ROWS_SPLIT)
    for j in tile(4, 2):
        acc = acc + tf.reduce(x[:, j], axes=(1,), keepdim=True, kind="sum")
    return acc


@func
def pending_over_ctas(x: Tensor[(8 @ CTAS.k, 4), "f32"]):
    acc = tf.zeros((8, 1), "f32", layout=PENDING_OVER_CTAS)
    return tf.reshard(acc, layout=ROWS_SPLIT) + tf.reduce(x, axes=(1,), keepdim=True, kind="sum")


def test_a_split_zero_is_each_ctas_block_of_a_kernel_carry():
    pytest.importorskip("jax", reason="the Pallas exit needs jax")
    from tilefoundry.exits.pallas import run_pallas

    x = np.random.default_rng(3).standard_normal((8, 4)).astype(np.float32)
    want = x.astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(run_pallas(row_sums, x, interpret=True), want, rtol=1e-6)
    np.testing.assert_allclose(evaluate(row_sums, x), want, rtol=1e-6)


def test_a_pending_zero_over_ctas_is_refused_at_the_zeros():
    """docs/pallas.md: a Partial across CTAs has its addends in different program instances."""
    pytest.importorskip("jax", reason="the Pallas exit needs jax")
    from tilefoundry.exits.pallas import lower_pallas

    with pytest.raises(UnsupportedError) as caught:
        lower_pallas(pending_over_ctas, np.ones((8, 4), np.float32))
    assert caught.value.message.startswith("Zeros: its result is Partial(sum) over the CTAs")
    line = (
        Path(__file__)
        .read_text()
        .splitlines()
        .index('    acc = tf.zeros((8, 1), "f32", layout=PENDING_OVER_CTAS)')
    )
    assert caught.value.location.line == line + 1


# -- 8 XLA devices ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def on_devices(devices8):
    pytest.importorskip("jax", reason="the SPMD exit needs jax[lib]")
    arrays = programs.inputs()
    return arrays, {
        name: devices8.submit(programs.on_devices, name, arrays).result(timeout=TIMEOUT_S)
        for name in programs.PROGRAMS
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_the_step_on_8_xla_devices_equals_the_float64_reference(name, on_devices):
    arrays, runs = on_devices
    result, _ = runs[name]
    for got, want in zip(result, programs.numpy_step(*arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compiled_hlo_all_reduces_each_weight_once_outside_the_loop_or_4x_inside(on_devices):
    """Counted in XLA's optimised HLO (its all-reduce combiner may merge weights into one
    instruction, so operands are counted): the pending step all-reduces each weight's gradient
    once per step, outside the while loop; the step reducing inside the loop runs each weight's
    all-reduce MICRO times, inside it."""
    sys.path.insert(0, str(BENCHMARKS))
    from communication import hlo_collective_executions

    _, runs = on_devices
    found = {name: hlo_collective_executions(hlo) for name, (_, hlo) in runs.items()}
    for name, in_loop, executions in (("pending_step", False, 1), ("reduced_step", True, 4)):
        reduces = [c for c in found[name] if c["kind"] == "all-reduce"]
        assert sorted(b for c in reduces for b in c["operand_bytes"]) == WEIGHT_BYTES, name
        assert {(c["in_loop"], c["executions"]) for c in reduces} == {(in_loop, executions)}
        assert [c["kind"] for c in found[name]] == ["all-reduce"] * len(reduces), name
