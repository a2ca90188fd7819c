# ruff: noqa: F821
"""One emitter (issue 15 item 5; DESIGN §3: "emit_stablehlo(fn) of a program on a device mesh
gives its SPMD module"): the sharded program gets the SPMD module, the unsharded one the
single-device module, `portable=True` works for both, and exit refusals are located."""

import re
from pathlib import Path

import pytest

from exits.spmd.sharded_programs import PROGRAMS, TP
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.stablehlo.spmd import emit_spmd
from tilefoundry.frontend import Tensor, func

pytest.importorskip("jax", reason="the StableHLO toolchain tests need jax[lib]")

from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.exits.stablehlo.jaxlib_tools import make_context, parse_and_verify

BYTECODE_MAGIC = b"ML\xefR"


@func
def reshard_of_a_local(x: Tensor[(16 @ TP.tp, 8), "f32"]):
    y = tf.local(x)
    return tf.reshard(y, layout=(2, 8 @ TP.tp), storage="gmem")


def test_a_program_on_a_device_mesh_gets_its_spmd_module():
    for name in ("megatron_mlp", "partial_to_split", "looped_sequence_parallel"):
        fn = PROGRAMS[name].sharded
        text = emit_stablehlo(fn)
        assert text == emit_spmd(fn)
        assert "sdy.manual_computation" in text and "mhlo.num_partitions = 8" in text


def test_an_unsharded_program_gets_the_single_device_module():
    text = emit_stablehlo(PROGRAMS["megatron_mlp"].plain)
    parse_and_verify(text)
    assert "sdy." not in text and "num_partitions" not in text
    assert "func.func public @main" in text


def test_portable_works_for_both_and_keeps_the_collectives():
    """The SPMD artifact is StableHLO at the pinned target with Shardy's ops beside it (as
    jax.export serialises sharded programs); it deserialises to the same collectives."""
    from jaxlib.mlir.dialects import stablehlo

    plain = emit_stablehlo(PROGRAMS["megatron_mlp"].plain, portable=True)
    assert plain.startswith(BYTECODE_MAGIC)
    sharded = emit_stablehlo(PROGRAMS["looped_sequence_parallel"].sharded, portable=True)
    assert sharded.startswith(BYTECODE_MAGIC)
    with make_context() as ctx:
        text = str(stablehlo.deserialize_portable_artifact(ctx, sharded))
    assert "sdy.manual_computation" in text
    assert re.findall(r"stablehlo\.(all_gather|reduce_scatter)", text) == [
        "all_gather",
        "reduce_scatter",
    ]


@pytest.mark.parametrize("variant", ["sharded", "plain"])
def test_the_portable_artifact_carries_chlo_erf_legalized_to_stablehlo(variant):
    """The text emits erf as CHLO (StableHLO has no erf op); VHLO has no form for CHLO, so the
    artifact holds its StableHLO decomposition, as jax.export writes it."""
    from jaxlib.mlir.dialects import stablehlo

    fn = getattr(PROGRAMS["exact_gelu_megatron_mlp"], variant)
    assert "chlo.erf" in emit_stablehlo(fn)
    artifact = emit_stablehlo(fn, portable=True)
    assert artifact.startswith(BYTECODE_MAGIC)
    with make_context() as ctx:
        text = str(stablehlo.deserialize_portable_artifact(ctx, artifact))
    assert "chlo." not in text and "stablehlo.dot_general" in text


def test_an_exit_refusal_carries_the_source_location_of_the_op():
    refusal = r"cannot reshard a per-device \(Local\) value"
    with pytest.raises(UnsupportedError, match=refusal) as caught:
        emit_stablehlo(reshard_of_a_local)
    assert caught.value.location is not None
    assert caught.value.location.line == line_of("return tf.reshard(y, ")
    assert str(caught.value).splitlines()[-1].strip().startswith("at ")


def line_of(text: str) -> int:
    """The line of this file that holds `text` (the op the exit refuses)."""
    source = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(source, 1) if text in line and "line_of" not in line)
