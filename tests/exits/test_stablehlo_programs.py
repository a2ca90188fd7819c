"""Whole DSL programs through the StableHLO exit: every unsharded program of the frontend suite
runs on XLA and matches the reference evaluator; a few have golden emitter text (refresh with
`pytest --update-golden` and read the diff); sharded ones fail closed at this single-device exit."""

from __future__ import annotations

import numpy as np
import pytest

from frontend import programs
from support.stablehlo_check import assert_matches, check, checked_text
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types import is_static
from tilefoundry.passes import compile

pytest.importorskip("jax", reason="the StableHLO toolchain tests need jax[lib]")

from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo

UNSHARDED = [
    "elementwise_chain",
    "shared_subexpression",
    "comparisons_and_logic",
    "integer_ops",
    "unary_ops",
    "float_rule_bf16",
    "float_rule_scalar_on_left",
    "int_scalar",
    "captured_constants",
    "compile_time_arithmetic",
    "reductions",
    "mean_center",
    "matmul_chain",
    "attention",
    "rms_norm_block",
    "rms_norm_by_hand",
    "activations",
    "slicing",
    "casts",
    "tuple_returns",
    "unpack_topk",
    "tiled_accumulate",
    "multi_carry_loop",
    "nested_loops",
    "loop_invariant_hoisting",
    "const_and_storage",
    "static_if",
    "calls_between_functions",
]
SHARDED = [
    "sharded_signature",
    "partial_signature",
    "multi_axis_split",
    "column_row_parallel_mlp",
    "body_layout_tuple_form",
    "sharded_call_sites",
]
GOLDEN = ["matmul_chain", "attention", "rms_norm_block", "tiled_accumulate", "unpack_topk"]


def arguments(fn, extent: int = 5, seed: int = 0) -> list[np.ndarray]:
    """Random arguments for `fn`'s parameters: symbolic extents take `extent`, integers are
    non-zero (integer_ops divides by its second argument)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for param in fn.params:
        type_ = param.type
        shape = tuple(int(d) if is_static(d) else extent for d in type_.shape)
        dtype = np.dtype(type_.dtype.to_numpy())
        if type_.dtype.is_int:
            values = rng.integers(1, 20, shape) * rng.choice([-1, 1], shape)
        else:
            values = rng.standard_normal(shape)
        arrays.append(values.astype(dtype))
    return arrays


@pytest.mark.parametrize("name", UNSHARDED)
def test_program_runs_on_xla_and_matches_the_reference(name):
    fn = getattr(programs, name)
    check(fn, *arguments(fn))


@pytest.mark.parametrize("name", UNSHARDED)
def test_fused_program_runs_on_xla_and_matches_the_unfused_reference(name):
    """SFEP-0053 §3.5/§3.7: fusion regions are emitted inline and compute what the unfused
    program computes; the proof compares XLA's run of compile(fn) with evaluate(fn)."""
    fn = getattr(programs, name)
    fused, _ = compile(fn)
    args = arguments(fn)
    checked_text(fused, *args)
    assert_matches(run_xla(fused, *args), evaluate(fn, *args))


@pytest.mark.parametrize("extent", [3, 100])
def test_dimvar_programs_bind_from_the_arguments(extent):
    # symbolic_shapes: S binds per call; Dispatch.entry: S selects the `small` / `large` variant
    for fn in (programs.symbolic_shapes, programs.Dispatch.entry):
        check(fn, *arguments(fn, extent))


def test_dispatch_emits_the_selected_variant():
    small = emit_stablehlo(programs.Dispatch.entry, bindings={"S": 3})
    large = emit_stablehlo(programs.Dispatch.entry, bindings={"S": 100})
    assert "stablehlo.multiply" in small and "stablehlo.multiply" not in large
    assert "stablehlo.add" in large


def test_a_module_emits_every_function_public():
    text = emit_stablehlo(programs.SiblingCalls)
    assert "func.func public @inner" in text and "func.func public @outer" in text


@pytest.mark.parametrize("name", SHARDED)
def test_sharded_programs_get_the_spmd_module(name):
    """DESIGN §3: one emitter; a program on a mesh gets exactly what the SPMD exit gives it, its
    module or its refusal (a Partial parameter has no global value to pass)."""
    from tilefoundry.exits.stablehlo.jaxlib_tools import parse_and_verify
    from tilefoundry.exits.stablehlo.spmd import emit_spmd

    fn = getattr(programs, name)
    try:
        expected = emit_spmd(fn)
    except UnsupportedError as err:
        with pytest.raises(UnsupportedError) as caught:
            emit_stablehlo(fn)
        assert caught.value.message == err.message
        return
    text = emit_stablehlo(fn)
    assert text == expected and "sdy.manual_computation" in text
    parse_and_verify(text)


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_emitter_text(name, golden):
    golden(f"stablehlo/{name}.txt", emit_stablehlo(getattr(programs, name)))
