"""Memory per device before the run (issue 26 item 5): `ir.hir.device_memory` from the types.

The truth: the per-device block of a type is its global bytes over the devices a Split shares
it among (types §8: Broadcast and Partial keep the whole value on each device); the peak is that
of `footprint`'s schedule (each step runs, of the nodes whose operands are computed, one that
frees at least what it allocates, else the one furthest from the result, ties to the one that
allocates least; a value is freed after its last reader; a call holds its callee's peak while it
runs), worked by hand below for small programs, and the values live at the peak add up to it;
and XLA's own memory analysis of the compiled steps, which places exactly the argument bytes we
count and, fusing and reusing buffers, needs less than the estimate for the rest.
"""

import numpy as np
import pytest

from tilefoundry.errors import EvalError
from tilefoundry.frontend import parse_source
from tilefoundry.ir.hir.device_memory import (
    check_device_memory,
    device_memory,
    parse_size,
)
from tilefoundry.ir.hir.footprint import device_bytes, peak_bytes_per_device
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from train import optim_programs as programs
from train import train_llama_checks as checks

TIMEOUT_S = 900
MESH = make_mesh((2, 4), ("dp", "tp"))
N = 64 * 32 * 4  # bytes of one f32 (64, 32) value


@pytest.mark.parametrize(
    ("attrs", "devices_sharing"),
    [
        ((B, B), 1),  # replicated: every device holds it whole
        ((S(0), B), 2),  # split over dp
        ((B, S(1)), 4),  # split over tp
        ((S(0), S(1)), 8),  # split over both
        ((P("sum"), S(1)), 4),  # a pending sum: each device holds a whole addend of its block
    ],
)
def test_a_device_holds_its_block(attrs, devices_sharing):
    type_ = make_shard_tensor_type((64, 32), f32, mesh=MESH, attrs=attrs)
    assert device_bytes(type_, {}) == N // devices_sharing
    assert device_bytes(make_tensor_type((64, 32), f32), {}) == N


CHAINS = """
from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func


@func
def short_lived(x: Tensor[(64, 32), "f32"]):
    a = x + 1.0
    b = a * 2.0
    return b * 3.0


@func
def first_read_last(x: Tensor[(64, 32), "f32"]):
    a = x + 1.0
    b = a * 2.0
    return b + a


@func
def inner(x: Tensor[(64, 32), "f32"]):
    return tf.exp(tf.exp(x))


@func
def calls(x: Tensor[(64, 32), "f32"]):
    return inner(x) + 1.0


@func
def looped(x: Tensor[(64, 32), "f32"]):
    for _ in range(8):
        x = tf.exp(x) * 0.5
    return x
"""


@pytest.fixture(scope="module")
def chains():
    return parse_source(CHAINS, "<chains>")


def test_the_peak_frees_a_value_after_its_last_reader(chains):
    """By the schedule: the constant 1.0 (4 bytes) runs first (furthest from the result), then
    2.0 (as far from it as a, and allocating less), then a, freeing 1.0. In short_lived b frees
    a and 2.0, so it runs next, while they are held: a, 2.0 and b, 2N + 4; then 3.0 and the
    product: b, 3.0 and the product, 2N + 4 again. In first_read_last b cannot free a (the sum
    reads it): the sum runs with a and b held, 3N."""
    short, long = (device_memory(chains[name]) for name in ("short_lived", "first_read_last"))
    assert short.arguments == long.arguments == (("x", N),)
    assert short.peak_values == 2 * N + 4
    assert sorted(size for _, size in short.live_at_peak) == [4, N, N]
    assert long.peak_values == 3 * N
    assert [size for _, size in long.live_at_peak] == [N, N, N]
    assert long.total == 4 * N == peak_bytes_per_device(chains["first_read_last"])


def test_the_values_live_at_the_peak_name_a_call_by_its_callee(chains):
    """inner's peak is its two exps (2N: the first is freed once the second is computed). In
    calls the constant 1.0 runs first (it allocates less than the call, as far from the
    result), then the call, holding inner's peak while it runs: 1.0 and 2N. The sum after it
    holds 1.0, the call's result and the sum, 2N + 4 again, not more."""
    memory = device_memory(chains["calls"])
    assert memory.peak_values == 2 * N + 4
    assert memory.live_at_peak == (("inside inner", 2 * N), ("Constant", 4))
    assert memory.largest(2) == [("inside inner", 2 * N), ("x", N)]


def test_the_values_live_at_the_peak_name_a_loop_by_one_iteration(chains):
    """The loop's result (N) is held while an iteration runs: 0.5 first (it allocates less than
    exp, as far from the iteration's result), exp, then the product, which frees exp and 0.5
    but is computed while they are held: 2N + 4. Eight iterations cost one's worth."""
    memory = device_memory(chains["looped"])
    assert memory.peak_values == 3 * N + 4
    assert memory.live_at_peak == (("a loop, one iteration of its body", 3 * N + 4),)


def test_zero_holds_an_eighth_of_the_optimizer_state_per_device():
    zero, replicated = (device_memory(f) for f in (programs.zero_step, programs.replicated_step))
    names = [name for name, _ in replicated.arguments]
    assert names == [name for name, _ in zero.arguments]
    for (name, z), (_, r) in zip(zero.arguments, replicated.arguments, strict=True):
        if name.startswith(("mu", "nu")):
            assert z * 8 == r, name
        else:
            assert z == r, name


def test_a_step_over_the_budget_is_refused_naming_its_largest_contributors():
    fn = checks.example().train_step
    memory = device_memory(fn)
    assert check_device_memory(fn, None, memory.total, "run") == memory
    with pytest.raises(EvalError) as caught:
        check_device_memory(fn, None, memory.total - 1, "run")
    message = str(caught.value)
    assert message.startswith("run: Function train_step needs about ")
    assert "more than the" in message and "per device of --device-memory" in message
    for name, _ in memory.largest():
        assert name in message


@pytest.mark.parametrize(("text", "size"), [("80G", 80 * 2**30), ("512M", 2**29), ("4096", 4096),
                                            ("1.5KB", 1536)])  # fmt: skip
def test_sizes_read_binary_units(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8x", "-1G", "0", "inf"])
def test_a_size_that_is_not_one_is_refused(text):
    with pytest.raises(ValueError, match="expected a size such as 80G"):
        parse_size(text)


@pytest.mark.slow
def test_the_estimate_against_xlas_memory_analysis(devices8):
    """Arguments: exactly XLA's (the same blocks placed on each device). The rest: XLA needs
    less than our peak of computed values (it fuses elementwise chains, reuses buffers, and
    writes the donated state's results into the arguments' buffers: its alias bytes), so the
    estimate is an upper bound; for the training example it is within 1.5x of XLA's total."""
    found = devices8.submit(checks.xla_memory).result(timeout=TIMEOUT_S)
    fns = {"train_step": checks.example().train_step, **programs.PROGRAMS}
    for name, (arguments, output, alias, temp) in found.items():
        ours = device_memory(fns[name])
        assert ours.argument_bytes == arguments, name
        xla_total = arguments + output - alias + temp
        assert xla_total <= ours.total, name
    arguments, output, alias, temp = found["train_step"]
    assert device_memory(fns["train_step"]).total <= 1.5 * (arguments + output - alias + temp)
    # ZeRO-1 by XLA's count: the argument bytes differ by 7/8 of the two AdamW states
    state = 2 * sum(4 * int(np.prod(t.shape)) for t in programs.WEIGHT_TYPES)
    assert found["replicated_step"][0] - found["zero_step"][0] == state * 7 // 8
