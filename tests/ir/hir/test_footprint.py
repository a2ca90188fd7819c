"""Resource checks before work (issue 20: "the evaluator and the exits estimate a program's memory
from its types and refuse with the figure when it cannot fit (a configurable limit, default from
the machine's memory)"), and the per-device peak of a schedule (issue 26 item 4: what remat
saves). Expected byte counts are worked out by hand from the shapes."""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from tilefoundry.errors import EvalError
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.core import Tuple
from tilefoundry.ir.hir.footprint import (
    MEMORY_ENV,
    device_bytes,
    memory_limit,
    memory_setting,
    peak_bytes_per_device,
    program_bytes,
    value_bytes,
)
from tilefoundry.ir.hir.math import Binary, BinaryKind
from tilefoundry.ir.hir.tensor import TupleGetItem
from tilefoundry.ir.types import DimVar, f32, i8, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import Broadcast, Split, make_mesh

N = DimVar("N", 1, 2**40)


def doubled(shape=(256,)):
    return function_of(
        {"x": make_tensor_type(shape, f32)}, lambda x: call(Binary(kind=BinaryKind.ADD), x, x)
    )


def test_the_estimate_counts_parameters_and_computed_values_once():
    assert program_bytes(doubled(), {}) == 256 * 4 * 2  # x, and x + x
    assert program_bytes(doubled((N,)), {"N": 10}) == 10 * 4 * 2


def test_a_mesh_value_counts_once_per_device_holding_a_copy():
    mesh = make_mesh((2, 4), ("a", "b"))
    split = make_shard_tensor_type((8, 8), i8, mesh=mesh, attrs=(Split(0), Split(1)))
    half = make_shard_tensor_type((8, 8), i8, mesh=mesh, attrs=(Split(0), Broadcast()))
    replicated = make_shard_tensor_type((8, 8), i8, mesh=mesh, attrs=(Broadcast(), Broadcast()))
    assert value_bytes(split, {}) == 64
    assert value_bytes(half, {}) == 64 * 4
    assert value_bytes(replicated, {}) == 64 * 8


@pytest.mark.parametrize(("setting", "limit"), [("100", 100), ("2K", 2048), ("1.5G", 3 * 2**29)])
def test_the_limit_is_configurable(monkeypatch, setting, limit):
    monkeypatch.setenv(MEMORY_ENV, setting)
    assert memory_limit() == limit


def test_the_default_limit_is_the_machines_memory(monkeypatch):
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    with open("/proc/meminfo", encoding="ascii") as info:
        total_kib = int(info.readline().split()[1])
    assert abs(memory_limit() - total_kib * 1024) < 64 * 2**20


def test_the_setting_read_on_every_cached_call_follows_os_environ_writes(monkeypatch):
    """`memory_setting` (read on each cached run_xla / evaluate call) sees a setting made and
    removed through os.environ, as `memory_limit` does."""
    monkeypatch.delenv(MEMORY_ENV, raising=False)
    assert memory_setting() is None
    monkeypatch.setenv(MEMORY_ENV, "8G")
    assert memory_setting() in (b"8G", "8G")
    monkeypatch.delenv(MEMORY_ENV)
    assert memory_setting() is None


def test_a_bad_setting_is_named(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(EvalError, match=f"{MEMORY_ENV}='lots' is not a size"):
        memory_limit()


def test_evaluate_refuses_up_front_with_the_figure(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "1K")
    x = np.ones(256, np.float32)
    with pytest.raises(EvalError, match=r"needs about 2\.0 KiB .* more than the 1\.0 KiB limit"):
        evaluate(doubled(), x)
    monkeypatch.setenv(MEMORY_ENV, "2K")
    np.testing.assert_array_equal(evaluate(doubled(), x), x + x)


def test_run_xla_refuses_up_front_with_the_figure(monkeypatch):
    pytest.importorskip("jax")
    from tilefoundry.exits.runtimes.xla import run_xla

    monkeypatch.setenv(MEMORY_ENV, "1K")
    with pytest.raises(EvalError, match=r"run_xla: Function f needs about 2\.0 KiB"):
        run_xla(doubled(), np.ones(256, np.float32))


CHAIN_SOURCE = """
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

M = make_mesh((4,), ("m",))

@func
def chain(x: Tensor[(256,), "f32"]):
    a = x * 2.0
    b = a * 3.0
    return b + a

@func
def shrinks(x: Tensor[(256,), "f32"], y: Tensor[(256,), "f32"]):
    big = tf.exp(x)
    total = tf.reduce(big, axes=(0,), keepdim=False, kind="sum")
    return tf.exp(y) * total

@func
def split(x: Tensor[(256 @ M.m,), "f32"]):
    return x * 2.0

@func
def looped(x: Tensor[(256,), "f32"]):
    for _ in range(8):
        x = tf.exp(x) * 0.5
    return x

@func
def inner(x: Tensor[(256,), "f32"]):
    return tf.exp(tf.exp(x))

@func
def calls(x: Tensor[(256,), "f32"]):
    return inner(x) + 1.0
"""
KB = 256 * 4
"""One (256,) f32 value."""


@pytest.fixture(scope="module")
def schedules():
    return parse_source(CHAIN_SOURCE, "schedules.py")


def test_the_peak_counts_the_values_live_together(schedules):
    """x, a and b are live when b + a runs (a is read last there): with the result, 4 values."""
    assert peak_bytes_per_device(schedules["chain"]) == 4 * KB


def test_a_value_is_freed_after_its_last_reader_and_a_shrinking_node_runs_first(schedules):
    """exp(x) is reduced to a scalar before exp(y) is computed (x, y, exp(x), the scalar), and
    freed: then x, y, the scalar, exp(y) and the product."""
    assert peak_bytes_per_device(schedules["shrinks"]) == 4 * KB + 4


def test_a_device_holds_its_block_of_a_split_value(schedules):
    fn = schedules["split"]
    assert device_bytes(fn.params[0].type, {}) == KB // 4
    assert peak_bytes_per_device(fn) == 2 * KB // 4 + 4  # x's block, 2.0, the product's block


def test_a_loop_body_is_live_one_iteration_at_a_time(schedules):
    """x, the loop's carry, and one iteration's exp, 0.5 and product: not eight iterations'
    worth."""
    assert peak_bytes_per_device(schedules["looped"]) == 4 * KB + 4


def test_a_called_functions_intermediates_live_only_while_it_runs(schedules):
    """x, the inner exp and the call's result while `inner` runs; then x, the call's result,
    the scalar 1.0 and the sum (with the inner exp kept, one value more)."""
    assert peak_bytes_per_device(schedules["calls"]) == 3 * KB + 4


def test_a_field_of_a_tuple_copies_nothing_also_when_it_is_a_tuple():
    """((x + x, x * x), x + x)[0][0]: the Tuples and both selections hold what they select, so
    the peak is x with the sum and the product, live together once the product is computed;
    counting the selected pair as a new value would add 2 KB more."""

    def nested(x):
        total = call(Binary(kind=BinaryKind.ADD), x, x)
        product = call(Binary(kind=BinaryKind.MUL), x, x)
        pair = call(TupleGetItem(index=0), Tuple((Tuple((total, product)), total)))
        return call(TupleGetItem(index=0), pair)

    fn = function_of({"x": make_tensor_type((256,), f32)}, nested)
    assert peak_bytes_per_device(fn) == 3 * KB
