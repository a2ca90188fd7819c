"""The main job: a short, computed tour of what the compiler does.

A transformer block (examples/transformer_block.py) runs end to end on the reference evaluator,
is compiled (legalize, verify, fuse, verify) and the fused program is checked against the
original; the CuTe layout algebra and the seed's sharded layout (shard-layout §7.5) get a few
lines; a wrong sharding is refused at compile time; the Megatron MLP runs on 8 simulated devices;
and where jax is installed the block runs on XLA (and the Megatron MLP on 8 XLA devices when the
multi-device exit exists). Every number printed is computed here at run time.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.types.shard import (
    Layout,
    ShardLayout,
    Split,
    factor_sugar,
    make_mesh,
    per_instance_strides,
    shard_layout_local_shape,
    shared_strides,
)
from tilefoundry.ir.types.shard.layout import composition
from tilefoundry.passes import compile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
"""The examples ship with the source tree, which the README's editable install runs from."""

DEMO_DEVICES = 8

REFUSED_PROGRAM = """
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

TP = make_mesh((8,), ("tp",))


@func
def reads_partial(x: Tensor[(16, 64), "f32"], w: Tensor[(64 @ TP.tp, 32), "f32"]):
    return tf.relu(x @ w)
"""


def _section(out: TextIO, title: str) -> None:
    out.write(f"\n== {title}\n")


def _load(name: str, function: str):
    path = EXAMPLES / f"{name}.py"
    return parse_source(path.read_text(encoding="utf-8"), str(path))[function]


def _inputs(fn, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(tuple(int(d) for d in p.type.shape)) * 0.5).astype(np.float32)
        for p in fn.params
    ]


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def _transformer_block(out: TextIO):
    _section(out, "a transformer block on the reference evaluator (examples/transformer_block.py)")
    block = _load("transformer_block", "transformer_block")
    arrays = _inputs(block, seed=0)
    start = time.perf_counter()
    result = evaluate(block, *arrays)
    took = time.perf_counter() - start
    out.write(f"{len(block.params)} parameters, RMSNorm -> attention with RoPE -> SiLU-gated MLP\n")
    out.write(
        f"output {result.dtype}{list(result.shape)}: mean {result.mean():.4f}, "
        f"std {result.std():.4f}, sum |out| {float(np.abs(result).sum()):.3f}  "
        f"({took * 1e3:.1f} ms)\n"
    )
    _section(out, "compile: legalize -> verify -> fuse -> verify")
    fused, report = compile(block)
    out.write(f"{report}\n")
    out.write(
        f"fused vs unfused on the reference: max |diff| = "
        f"{_max_diff(evaluate(fused, *arrays), result):.3g}\n"
    )
    return block, arrays, result


def _sharding(out: TextIO) -> None:
    _section(out, "layouts: CuTe algebra and shard-layout §7.5 (a (2, 1536) tensor)")
    a, b = Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))
    out.write(f"composition({a}, {b}) = {composition(a, b)}\n")
    mesh = make_mesh((2, 4, 32), ("x", "y", "t"))
    positions = [
        *factor_sugar(2, mesh.x),
        *factor_sugar(12, mesh.y),
        *factor_sugar(128, mesh.t),
    ]
    shape = tuple(extent for extent, _ in positions)
    split_at = {axis.index: k for k, (_, axis) in enumerate(positions) if axis is not None}
    attrs = tuple(Split(split_at[a]) for a in range(mesh.rank))
    layout = ShardLayout(Layout(shape), attrs, mesh)
    out.write(f"mesh                 {mesh!r}\n")
    out.write(f"local shape          {shard_layout_local_shape(layout)}\n")
    out.write(f"per-instance strides {per_instance_strides(layout)}  (gmem -> rmem)\n")
    out.write(f"shared strides       {shared_strides(layout)}  (rmem -> gmem)\n")
    try:
        parse_source(REFUSED_PROGRAM, "reads_partial.py")
        out.write("NOT refused: relu of a pending partial sum was accepted\n")
    except VerifyError as err:
        out.write(f"refused at compile time (relu of a pending partial sum):\n  {err.message}\n")


def _collectives_in_words(fn) -> str:
    """What the SPMD exit emits for `fn`, from its own record (no jax needed to emit)."""
    from tilefoundry.exits.spmd import collective_report

    entries = collective_report(fn)
    if not entries:
        return "no collectives"
    return ", ".join(
        f"{e.count} {e.kind} over {e.mesh_axes}"
        + (f" ({e.reduction})" if e.reduction else "")
        + f" of {e.bytes_per_device} B in, {e.result_bytes_per_device} B out per device"
        for e in entries
    )


def _megatron_reference(out: TextIO):
    _section(out, f"Megatron MLP on {DEMO_DEVICES} simulated devices (examples/megatron_mlp.py)")
    mlp = _load("megatron_mlp", "megatron_mlp")
    arrays = _inputs(mlp, seed=1)
    sharded = evaluate(mlp, *arrays)
    x, w1, w2 = (a.astype(np.float64) for a in arrays)
    h = x @ w1
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    out.write(
        "column-parallel w1, row-parallel w2; the SPMD exit emits "
        f"{_collectives_in_words(mlp)}; "
        f"vs plain numpy: max |diff| = {_max_diff(sharded, gelu @ w2):.3g}\n"
    )
    return mlp, arrays, sharded


def _xla(out: TextIO, block, block_arrays, block_result, mlp, mlp_arrays, mlp_result) -> None:
    _section(out, "XLA (through the StableHLO exit)")
    if importlib.util.find_spec("jax") is None:
        out.write("jax is not installed: XLA runs skipped (pip install -e '.[xla]' adds it)\n")
        return
    if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get(
        "XLA_FLAGS", ""
    ):
        flag = f"--xla_force_host_platform_device_count={DEMO_DEVICES}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    from tilefoundry.exits.xla import run_xla

    start = time.perf_counter()
    on_xla = run_xla(block, *block_arrays)
    took = time.perf_counter() - start
    out.write(
        f"transformer block on XLA CPU: max |diff| vs reference = "
        f"{_max_diff(on_xla, block_result):.3g}  (compile + run {took * 1e3:.0f} ms)\n"
    )
    try:
        sharded = run_xla(mlp, *mlp_arrays, devices=DEMO_DEVICES)
    except UnsupportedError as err:
        out.write(f"Megatron MLP on {DEMO_DEVICES} XLA devices: not available ({err.message})\n")
        return
    out.write(
        f"Megatron MLP on {DEMO_DEVICES} XLA devices: max |diff| vs reference = "
        f"{_max_diff(sharded, mlp_result):.3g}\n"
    )


def run_demo(out: TextIO) -> None:
    out.write("tilefoundry demo (embedded default: reference machinery, no server, no GPU)\n")
    if not EXAMPLES.is_dir():
        out.write(f"examples/ not found next to the package ({EXAMPLES}); showing layouts only\n")
        _sharding(out)
        return
    block, block_arrays, block_result = _transformer_block(out)
    _sharding(out)
    mlp, mlp_arrays, mlp_result = _megatron_reference(out)
    _xla(out, block, block_arrays, block_result, mlp, mlp_arrays, mlp_result)
