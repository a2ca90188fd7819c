"""The main job: a short, computed tour of what the compiler does.

A transformer block (examples/transformer_block.py) runs end to end on the reference evaluator,
is compiled (legalize, verify, fuse, verify) and the fused program is checked against the
original; the CuTe layout algebra and the seed's sharded layout (shard-layout §7.5) get a few
lines; a wrong sharding is refused at compile time; the Megatron MLP runs on 8 simulated devices;
a tensor-parallel Llama decoder layer (examples/llama.py) runs on 8 simulated devices; the gradient
of a Megatron MLP loss (examples/megatron_grad.py, `value_and_grad`) runs there too; a few AdamW
steps of examples/train_llama.py train a 2-layer Llama on a 2 x 4 simulated mesh; and where jax
is installed the block runs on XLA, and the Megatron MLP, the Llama layer, the gradient and the
training steps (state resident on the devices) on 8 XLA devices.
Every number printed is computed here at run time, and a sharded result is compared with plain
float64 numpy: `run_demo` returns False (the command exits 1) when one disagrees. A step the
compiler still refuses is reported with its refusal, and claims nothing.
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
AGREE = 1e-4
"""Largest difference from numpy, relative to the result's magnitude, that counts as agreement
(f32 against float64; the layers here stay well inside it)."""

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
    from tilefoundry.exits.stablehlo.spmd import collective_report

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


def _llama_numpy(names: dict, arrays: list[np.ndarray]) -> np.ndarray:
    """The layer in float64 numpy, from the model's definition (RMSNorm, rotate-half RoPE, causal
    softmax attention over heads, SwiGLU), with the example's sizes and rotary tables."""
    x, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down = (
        a.astype(np.float64) for a in arrays
    )
    batch, seq, hidden, heads = names["BATCH"], names["SEQ"], names["HIDDEN"], names["HEADS"]
    half = hidden // heads // 2
    cos, sin = (names[t][names["POSITIONS"]].astype(np.float64) for t in ("COS", "SIN"))

    def norm(v, w):
        return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + names["EPS"]) * w

    def split(v):
        return v.reshape(batch, seq, heads, 2 * half).transpose(0, 2, 1, 3)

    def rope(v):
        return v * cos + np.concatenate([-v[..., half:], v[..., :half]], axis=-1) * sin

    h = norm(x, attn_norm)
    q, k, v = rope(split(h @ wq)), rope(split(h @ wk)), split(h @ wv)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(2 * half)
    scores = np.where(np.triu(np.ones((seq, seq), bool), 1), -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    attended = (weights / weights.sum(axis=-1, keepdims=True)) @ v
    x = x + attended.transpose(0, 2, 1, 3).reshape(batch, seq, hidden) @ wo
    g = norm(x, mlp_norm)
    return x + (g @ w_gate / (1 + np.exp(-(g @ w_gate))) * (g @ w_up)) @ w_down


def _agrees(out: TextIO, label: str, got: np.ndarray, want: np.ndarray) -> bool:
    error = _max_diff(got, want) / max(float(np.max(np.abs(want))), 1.0)
    verdict = "agrees" if error <= AGREE else f"DISAGREES (more than {AGREE:g})"
    out.write(
        f"{label}: max |diff| vs float64 numpy = {error:.3g} of the output scale, {verdict}\n"
    )
    return error <= AGREE


def _llama(out: TextIO):
    """The TP layer, its inputs (projections scaled by 1/sqrt(fan-in)), its numpy answer, and
    whether the simulation held up."""
    _section(out, f"a Llama decoder layer, tensor parallel on {DEMO_DEVICES} simulated devices")
    path = EXAMPLES / "llama.py"
    names = parse_source(path.read_text(encoding="utf-8"), str(path))
    layer = names["llama_tp"]
    arrays = _inputs(layer, seed=2)
    arrays[2:] = [
        a if a.ndim == 1 else (a * (2 / np.sqrt(a.shape[0]))).astype(np.float32) for a in arrays[2:]
    ]
    want = _llama_numpy(names, arrays)
    out.write(
        "examples/llama.py llama_tp: RMSNorm, q/k/v column-split (one head per device), RoPE, "
        "causal attention, o row-split; RMSNorm, SwiGLU gate/up column-split, down row-split; "
        "one Reshard (all-reduce over tp) before each residual\n"
    )
    try:
        got = evaluate(layer, *arrays)
    except VerifyError as err:
        out.write(f"not yet: the simulator refuses it ({err.message})\n")
        return layer, arrays, want, True
    return layer, arrays, want, _agrees(out, "simulated", got, want)


def _gradient_numpy(arrays: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """The loss of examples/megatron_grad.py, mean((relu(x @ w1) @ w2 - target)^2), and its
    gradients with respect to x, w1 and w2, derived by hand in float64 numpy."""
    x, w1, w2, target = (a.astype(np.float64) for a in arrays)
    pre = x @ w1
    error = np.maximum(pre, 0) @ w2 - target
    d_out = 2 * error / error.size
    d_pre = (d_out @ w2.T) * (pre > 0)
    return np.mean(error * error), d_pre @ w1.T, x.T @ d_pre, np.maximum(pre, 0).T @ d_out


def _gradients(out: TextIO):
    """value_and_grad of the Megatron MLP's loss on the simulated mesh: its collectives (what
    the types made the backward communicate) and its gradients against numpy."""
    _section(out, f"gradients: value_and_grad on {DEMO_DEVICES} simulated devices")
    step = _load("megatron_grad", "train_step")
    arrays = _inputs(step, seed=3)
    want = _gradient_numpy(arrays)
    out.write(
        "examples/megatron_grad.py train_step = value_and_grad(loss, argnums=(0, 1, 2)): the "
        "backward is typed by the forward's rules (d w1, d w2 split as the weights; d x a "
        f"pending sum over tp); the SPMD exit emits {_collectives_in_words(step)}\n"
    )
    got = _scaled(evaluate(step, *arrays), want)
    expected = _scaled(want, want)
    return step, arrays, want, _agrees(out, "loss and gradients, simulated", got, expected)


def _scaled(result, want: tuple[np.ndarray, ...]) -> np.ndarray:
    """(value, (gradients...)) or (value, gradients...) as one vector, each piece divided by
    the largest magnitude of its numpy answer, so agreement is relative to each gradient."""
    value, *rest = result
    pieces = [value, *(rest[0] if len(rest) == 1 and isinstance(rest[0], tuple) else rest)]
    return np.concatenate(
        [
            np.ravel(p) / max(float(np.max(np.abs(w))), 1e-30)
            for p, w in zip(pieces, want, strict=True)
        ]
    )


def _xla(
    out: TextIO,
    block,
    block_arrays,
    block_result,
    mlp,
    mlp_arrays,
    mlp_result,
    llama,
    gradients,
    losses,
):
    """Runs the XLA steps; False when a result it prints disagrees with numpy."""
    _section(out, "XLA (through the StableHLO exit)")
    if importlib.util.find_spec("jax") is None:
        out.write("jax is not installed: XLA runs skipped (pip install -e '.[xla]' adds it)\n")
        return True
    if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get(
        "XLA_FLAGS", ""
    ):
        flag = f"--xla_force_host_platform_device_count={DEMO_DEVICES}"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip()
    from tilefoundry.exits.runtimes.xla import run_xla

    start = time.perf_counter()
    on_xla = run_xla(block, *block_arrays)
    took = time.perf_counter() - start
    out.write(
        f"transformer block on XLA CPU: max |diff| vs reference = "
        f"{_max_diff(on_xla, block_result):.3g}  (compile + run {took * 1e3:.0f} ms)\n"
    )
    try:
        sharded = run_xla(mlp, *mlp_arrays, devices=DEMO_DEVICES)
        out.write(
            f"Megatron MLP on {DEMO_DEVICES} XLA devices: max |diff| vs reference = "
            f"{_max_diff(sharded, mlp_result):.3g}\n"
        )
    except UnsupportedError as err:
        out.write(f"Megatron MLP on {DEMO_DEVICES} XLA devices: not available ({err.message})\n")
    agreed = True
    for fn, fn_arrays, want, label in (
        (*llama, f"Llama TP layer on {DEMO_DEVICES} XLA devices"),
        (*gradients, f"Megatron MLP loss and gradients on {DEMO_DEVICES} XLA devices"),
    ):
        try:
            on_devices = run_xla(fn, *fn_arrays, devices=DEMO_DEVICES)
        except UnsupportedError as err:
            out.write(f"{label}: not yet, the SPMD exit refuses it ({err.message})\n")
            continue
        if isinstance(want, tuple):  # the loss and its gradients
            on_devices, want = _scaled(on_devices, want), _scaled(want, want)
        agreed = _agrees(out, label, on_devices, want) and agreed
    return _training_on_xla(out, losses) and agreed


TRAIN_STEPS = 3


def _training(out: TextIO) -> tuple[list[float], bool]:
    """A few AdamW steps of examples/train_llama.py on the simulated 2 x 4 mesh: the losses,
    and whether they fall."""
    _section(
        out, f"training: {TRAIN_STEPS} AdamW steps of a 2-layer Llama on 2 x 4 simulated devices"
    )
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import train_llama

    _, losses = train_llama.train(train_llama.start(), TRAIN_STEPS, backend="reference")
    out.write(
        "examples/train_llama.py: train_step = optim.training_step(loss, optim.adamw(...)) on "
        "DP x TP (the weight gradients all-reduced over dp, Megatron's over tp); the SPMD exit "
        f"emits {_collectives_in_words(train_llama.train_step)}\n"
        f"losses, simulated: {', '.join(f'{v:.4f}' for v in losses)}\n"
    )
    falls = losses[-1] < losses[0]
    if not falls:
        out.write("the loss does not fall: DISAGREES with what AdamW must do here\n")
    return losses, falls


def _training_on_xla(out: TextIO, simulated: list[float]) -> bool:
    """The same steps with the state resident on 8 XLA devices (tilefoundry.jit)."""
    import train_llama

    _, losses = train_llama.train(train_llama.start(), TRAIN_STEPS)
    error = _max_diff(np.array(losses), np.array(simulated)) / max(simulated)
    verdict = "agrees" if error <= AGREE else f"DISAGREES (more than {AGREE:g})"
    out.write(
        f"training losses on {DEMO_DEVICES} XLA devices (state resident, donated): "
        f"{', '.join(f'{v:.4f}' for v in losses)}; max |diff| vs the simulation = "
        f"{error:.3g} of the loss, {verdict}\n"
    )
    return error <= AGREE


def run_demo(out: TextIO) -> bool:
    """The tour; True when every sharded result it prints agrees with numpy."""
    out.write("tilefoundry demo (embedded default: reference machinery, no server, no GPU)\n")
    if not EXAMPLES.is_dir():
        out.write(f"examples/ not found next to the package ({EXAMPLES}); showing layouts only\n")
        _sharding(out)
        return True
    block, block_arrays, block_result = _transformer_block(out)
    _sharding(out)
    mlp, mlp_arrays, mlp_result = _megatron_reference(out)
    layer, layer_arrays, layer_want, simulated = _llama(out)
    step, step_arrays, step_want, differentiated = _gradients(out)
    losses, trains = _training(out)
    on_xla = _xla(
        out,
        block,
        block_arrays,
        block_result,
        mlp,
        mlp_arrays,
        mlp_result,
        (layer, layer_arrays, layer_want),
        (step, step_arrays, step_want),
        losses,
    )
    return simulated and differentiated and trains and on_xla
