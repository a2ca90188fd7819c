# ruff: noqa: F821
"""The SPMD_LOWERING rules of the ops with mesh semantics, on XLA devices (the worker of
tests/conftest.py), against independent float64 numpy oracles and the mesh simulation.

DESIGN §4.12: "The unsharded result and the gathered sharded result must agree" and
"Communication happens only where the IR says so: Reshard, and the reductions whose seed rule
declares a complete effect" — so a head split, RoPE, a KV-cache write, joins and windows move no
data, and a vocab-parallel embedding (Gather over a split vocabulary: hir Gather "a Split on the
gathered axis becomes Partial(sum)") costs exactly the one all-reduce of the Reshard completing it.
"""

import re
from pathlib import Path

import numpy as np
import pytest

from exits.spmd import op_programs
from exits.spmd.op_programs import PROGRAMS, TP
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import collective_report, emit_spmd
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.core import Call
from tilefoundry.ir.hir.tensor import Reshape
from tilefoundry.ir.types.shard import Layout, S, ShardLayout
from tilefoundry.sharding.shard_reading import canonical_splits

pytest.importorskip("jax", reason="the SPMD exit tests need jax[lib]")

TIMEOUT_S = 300


def as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def assert_close(got, want, what: str) -> None:
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        assert g.shape == np.shape(w), f"{what}[{i}]"
        np.testing.assert_allclose(
            g.astype(np.float64), np.asarray(w, np.float64), rtol=1e-5, atol=1e-5, err_msg=what
        )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_runs_on_devices_like_numpy_and_the_simulation(name, devices8):
    arrays = op_programs.inputs(name)
    got = devices8.submit(op_programs.run, name, arrays).result(timeout=TIMEOUT_S)
    assert_close(got, PROGRAMS[name].oracle(*arrays), f"{name} vs numpy")
    assert_close(got, evaluate(PROGRAMS[name].fn, *arrays), f"{name} vs the simulation")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_communicates_only_what_the_ir_asks(name):
    kinds = tuple(entry.kind for entry in collective_report(PROGRAMS[name].fn))
    assert kinds == PROGRAMS[name].collectives


def _reshapes(fn) -> list[Call]:
    stack, seen, found = [fn.body], set(), []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Call) and isinstance(node.target, Reshape):
            found.append(node)
        stack.extend(node.operands())
    return found


def test_a_head_split_moves_the_split_to_the_head_axis_and_reshapes_locally():
    """(b, s, h*d) Split on h*d over 4 devices -> (b, s, h, d) Split on h: each device reshapes
    its (2, 4, 8) block to (2, 4, 1, 8); the merge back is the inverse, both local."""
    fn = PROGRAMS["tp_attention"].fn
    splits = sorted(
        (tuple(c.args[0].type.shape), canonical_splits(c.type, "test", "the test"))
        for c in _reshapes(fn)
    )
    assert splits == [((2, 4, 4, 8), {2: (0,)})] * 1 + [((2, 4, 32), {2: (0,)})] * 3
    text = emit_spmd(fn)
    assert len(re.findall(r"\(tensor<2x4x8xf32>\) -> tensor<2x4x1x8xf32>", text)) == 3
    assert len(re.findall(r"\(tensor<2x4x1x8xf32>\) -> tensor<2x4x8xf32>", text)) == 1


def test_the_vocab_parallel_lookup_is_masked_by_the_device_block():
    """Each device gathers from its 8 rows at index - 8 * coordinate, and keeps a row only where
    the index falls in its block (zeros elsewhere: its addend of the Partial(sum))."""
    text = emit_spmd(PROGRAMS["vocab_embedding"].fn)
    assert re.search(r'"stablehlo.gather"\(%l0, .*\(tensor<8x8xf32>, tensor<6xi32>\)', text)
    assert "stablehlo.partition_id" in text and "stablehlo.select" in text
    assert text.count('"stablehlo.all_reduce"') == 1


@func
def inner_factor_parameter(x: Tensor[(32,), "f32", ShardLayout(Layout((4, 4, 2)), (S(1),), TP)]):
    return tf.relu(x)


def _line_of(text: str) -> int:
    return 1 + Path(__file__).read_text().splitlines().index(text)


def test_an_exit_refusal_carries_the_source_location_of_the_refused_parameter():
    """DESIGN §1: an exit refuses "up front ..., naming the op and its source location". A Split
    on an inner factor (a strided share per device) only a signature can still carry."""
    with pytest.raises(UnsupportedError, match=r"^parameter 'x': .*inner factor") as info:
        emit_spmd(inner_factor_parameter)
    line = _line_of(
        'def inner_factor_parameter(x: Tensor[(32,), "f32", ShardLayout(Layout(('
        "4, 4, 2)), (S(1),), TP)]):"
    )
    assert info.value.location is not None
    assert (info.value.location.file, info.value.location.line) == (__file__, line)


def test_a_reshape_that_would_split_an_inner_factor_is_refused_when_checked():
    """Issue 28: what check accepts on a device mesh runs there, so the merge that folds an
    unsplit axis over a split one is refused by typeinfer, at its source line, not mid-lowering."""
    with pytest.raises(VerifyError, match=r"^Reshape: .*inner factor.*Broadcast on") as info:

        @func
        def inner_factor_flatten(x: Tensor[(4, 8 @ TP.tp), "f32"]):
            return tf.relu(tf.reshape(x, (32,)))

    line = _line_of("            return tf.relu(tf.reshape(x, (32,)))")
    assert f"at {__file__}:{line}:" in str(info.value)
