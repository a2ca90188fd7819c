"""Communication of sharded programs on 8 devices: the collectives and bytes per device our
SPMD lowering emits vs what JAX's automatic partitioner emits given the same input and output
shardings.

Our side is `tilefoundry.exits.stablehlo.spmd.collective_report`: the collectives the SPMD exit
writes into the module (it partitions manually, so XLA adds none), each with its operand and result
bytes per device.
The JAX side jits the same program written in jax.numpy with NamedSharding in/out shardings and
counts all-reduce / all-gather / all-to-all / collective-permute / reduce-scatter instructions in
the compiled HLO, with their operand and result bytes (the HLO is per device, so these are bytes
per device). A Partial -> Split is one reduce-scatter on our side: each device puts in the whole
partial and gets back its 1/8 block, where an all-reduce (+ slice) gives every device the whole
reduced value (the sequence-parallel row: 1,024 vs 8,192 bytes back per device). Both run in
one subprocess with `XLA_FLAGS=--xla_force_host_platform_device_count=8`
(this process keeps its one device), which first checks that three results agree: our module
run on the 8 devices (`run_xla(fn, *arrays, devices=8)`), JAX's, and our reference evaluator's
simulation of the mesh. No timing: the figures are exact.

The last four rows are examples: the Llama decoder layer of examples/llama.py, tensor parallel
and sequence parallel, the MoE layer of examples/moe.py (expert parallel) and the GPT-2 loss of
examples/gpt2.py (vocab parallel); JAX gets the same in/out shardings and
`with_sharding_constraint` where the DSL program reshards. Where our exit or simulator still
refuses a program, its row says so (and JAX's result is checked against the array code in
float64 numpy instead).
Run: `python benchmarks/communication.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from math import prod
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from _programs import allclose
from _timing import markdown_table, standard_arguments, write_results

DEVICE_FLAG = "--xla_force_host_platform_device_count=8"
COLLECTIVES = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")


@dataclass(frozen=True)
class ShardedExample:
    """A sharded program: a DSL def (over the meshes TP = 8 devices "tp" and M2 = 2x4 "x", "y",
    with the replicated layouts `parse_example` names), its inputs' global shapes, the same
    shardings as JAX PartitionSpec tuples (None = a replicated dim) with the mesh they are on,
    and the array code JAX partitions."""

    name: str
    dsl: str
    shapes: tuple[tuple[int, ...], ...]
    mesh: str
    in_specs: tuple[tuple[str | None, ...], ...]
    out_spec: tuple[str | None, ...]
    array_fn: Callable[..., Any]
    example: str | None = None
    """A @func of an example (`examples/llama.py` unless `file` says) to run instead of `dsl`;
    its array code then takes a `constrain(value, *spec)` keyword: JAX's
    `with_sharding_constraint` at the points where the DSL program reshards (identity for
    numpy), so both sides are given the same shardings."""
    file: str = "llama.py"
    activations: int = 1
    """How many leading arguments of an example are activations, drawn N(0, 1) as they are."""

    def arguments(self) -> list[np.ndarray]:
        """N(0, 1) inputs; an example's weights (every argument after the activations) are
        scaled by 1/sqrt(fan-in), around 1 for a norm, so its softmax is not one-hot."""
        rng = np.random.default_rng(0)
        arrays = [rng.standard_normal(s) for s in self.shapes]
        if self.example is not None:
            first = self.activations
            arrays[first:] = [
                1 + 0.1 * a if a.ndim == 1 else a / np.sqrt(a.shape[-2]) for a in arrays[first:]
            ]
        return [a.astype(np.float32) for a in arrays]


def _silu(xp: Any, x: Any) -> Any:
    return x * (1.0 / (1.0 + xp.exp(-x)))


@cache
def _example_namespace(file: str) -> dict[str, Any]:
    from tilefoundry.frontend import parse_source

    path = Path(__file__).resolve().parents[1] / "examples" / file
    return parse_source(path.read_text(encoding="utf-8"), str(path))


def _llama_layer(xp: Any, *arrays: Any, gathered: tuple, residual: tuple, constrain: Any) -> Any:
    """examples/llama.py's layer in array code: `constrain(v, *gathered)` where the DSL reshards
    the normed activations (sequence parallel only), `constrain(v, *residual)` where it completes
    each row-parallel projection's pending sum."""
    c = _example_namespace("llama.py")
    batch, seq, hidden = c["BATCH"], c["SEQ"], c["HIDDEN"]
    heads, head_dim = c["HEADS"], c["HEAD_DIM"]
    x, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down = arrays
    cos, sin = c["COS"][c["POSITIONS"]], c["SIN"][c["POSITIONS"]]
    half = head_dim // 2

    def rms_norm(v: Any, w: Any) -> Any:
        return v / xp.sqrt(xp.mean(v * v, axis=-1, keepdims=True) + c["EPS"]) * w

    def heads_of(v: Any) -> Any:
        return xp.transpose(xp.reshape(v, (batch, seq, heads, head_dim)), (0, 2, 1, 3))

    def rope(v: Any) -> Any:
        return v * cos + xp.concatenate([-v[..., half:], v[..., :half]], axis=-1) * sin

    h = constrain(rms_norm(x, attn_norm), *gathered) if gathered else rms_norm(x, attn_norm)
    q, k, v = rope(heads_of(h @ wq)), rope(heads_of(h @ wk)), heads_of(h @ wv)
    scores = q @ xp.transpose(k, (0, 1, 3, 2)) * c["SCALE"] + c["CAUSAL_MASK"]
    scores = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    attended = (scores / xp.sum(scores, axis=-1, keepdims=True)) @ v
    merged = xp.reshape(xp.transpose(attended, (0, 2, 1, 3)), (batch, seq, hidden))
    x = x + constrain(merged @ wo, *residual)
    g = rms_norm(x, mlp_norm)
    g = constrain(g, *gathered) if gathered else g
    gate = g @ w_gate
    return x + constrain((gate / (1 + xp.exp(-gate)) * (g @ w_up)) @ w_down, *residual)


def _top_k(xp: Any, x: Any, k: int) -> tuple[Any, Any]:
    """The k largest along the last axis, ties to the lower index (as tf.topk and lax.top_k)."""
    if xp is np:
        index = np.argsort(-x, axis=-1, kind="stable")[..., :k]
        return np.take_along_axis(x, index, axis=-1), index
    import jax

    return jax.lax.top_k(x, k)


def _scatter_add_rows(xp: Any, table: Any, slots: Any, rows: Any) -> Any:
    """`table[g, slots[g, j]] += rows[g, j]` (tf.scatter_add with batch_dims=1)."""
    groups = xp.arange(table.shape[0])[:, None]
    if xp is np:
        out = table.copy()
        np.add.at(out, (groups, slots), rows)
        return out
    return table.at[groups, slots].add(rows)


def _moe_layer(xp: Any, x: Any, w_router: Any, w1: Any, w3: Any, w2: Any, *, constrain) -> Any:
    """examples/moe.py's layer in array code: `constrain` at its two Reshards (group-split to
    expert-split and back); the experts as one batched matmul over the expert axis."""
    c = _example_namespace("moe.py")
    groups, tokens, hidden = c["GROUPS"], c["TOKENS"], c["HIDDEN"]
    experts, top_k, capacity, choices = c["EXPERTS"], c["TOP_K"], c["CAPACITY"], c["CHOICES"]
    logits = x @ w_router
    probs = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
    probs = probs / xp.sum(probs, axis=-1, keepdims=True)
    top_p, top_i = _top_k(xp, probs, top_k)
    top_p = top_p / xp.sum(top_p, axis=-1, keepdims=True)
    choice = xp.reshape(xp.transpose(top_i, (0, 2, 1)), (groups, choices))
    weight = xp.reshape(xp.transpose(top_p, (0, 2, 1)), (groups, choices))
    chosen = (choice[..., None] == xp.arange(experts)).astype(choice.dtype)
    position = xp.sum((xp.cumsum(chosen, axis=1) - chosen) * chosen, axis=2)
    kept = position < capacity
    slot = choice * capacity + xp.minimum(position, capacity - 1)
    weight = xp.where(kept, weight, 0.0)
    routed = xp.reshape(
        xp.broadcast_to(x[:, None], (groups, top_k, tokens, hidden)), (groups, choices, hidden)
    )
    routed = xp.where(kept[..., None], routed, 0.0)
    table = xp.zeros((groups, experts * capacity, hidden), dtype=x.dtype)
    dispatched = xp.reshape(
        _scatter_add_rows(xp, table, slot, routed), (groups, experts, capacity, hidden)
    )
    by_expert = constrain(dispatched, None, "tp", None, None)
    h = xp.reshape(xp.transpose(by_expert, (1, 0, 2, 3)), (experts, groups * capacity, hidden))
    gate = h @ w1
    out = (gate / (1.0 + xp.exp(-gate)) * (h @ w3)) @ w2
    back = xp.transpose(xp.reshape(out, (experts, groups, capacity, hidden)), (1, 0, 2, 3))
    back = xp.reshape(constrain(back, "tp", None, None, None), (groups, experts * capacity, hidden))
    picked = xp.take_along_axis(back, slot[..., None], axis=1) * weight[..., None]
    return xp.sum(xp.reshape(picked, (groups, top_k, tokens, hidden)), axis=1)


_MOE_SHAPES = ((8, 16, 32), (32, 16), (16, 32, 64), (16, 32, 64), (16, 64, 32))


def _gpt2_loss(xp: Any, *weights: Any, constrain) -> Any:
    """examples/gpt2.py's loss on its fixed batch in array code: `constrain` where the DSL
    reshards (the embedding, both row-parallel projections, the target logit)."""
    c = _example_namespace("gpt2.py")
    batch, seq, dim, heads = c["BATCH"], c["SEQ"], c["DIM"], c["HEADS"]
    head_dim, eps, tokens = dim // heads, c["EPS"], batch * seq
    wte, wpe, ln1_w, ln1_b, wq, bq, wk, bk, wv, bv, wo, bo = weights[:12]
    ln2_w, ln2_b, w_fc, b_fc, w_proj, b_proj, lnf_w, lnf_b = weights[12:]

    def layer_norm(v: Any, w: Any, b: Any) -> Any:
        centred = v - xp.mean(v, axis=-1, keepdims=True)
        return centred / xp.sqrt(xp.mean(centred * centred, axis=-1, keepdims=True) + eps) * w + b

    def split_heads(v: Any) -> Any:
        return xp.transpose(xp.reshape(v, (batch, seq, heads, head_dim)), (0, 2, 1, 3))

    def gelu(v: Any) -> Any:
        return 0.5 * v * (1.0 + xp.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v * v * v)))

    replicated = (None, None, None)
    x = constrain(xp.take(wte, c["TOKENS"], axis=0), *replicated) + wpe
    h = layer_norm(x, ln1_w, ln1_b)
    q, k, v = (split_heads(h @ m + b) for m, b in ((wq, bq), (wk, bk), (wv, bv)))
    scores = q @ xp.transpose(k, (0, 1, 3, 2)) * c["SCALE"] + c["CAUSAL_MASK"]
    scores = xp.exp(scores - xp.max(scores, axis=-1, keepdims=True))
    attended = (scores / xp.sum(scores, axis=-1, keepdims=True)) @ v
    merged = xp.reshape(xp.transpose(attended, (0, 2, 1, 3)), (batch, seq, dim))
    x = x + (constrain(merged @ wo, *replicated) + bo)
    h = layer_norm(x, ln2_w, ln2_b)
    x = x + (constrain(gelu(h @ w_fc + b_fc) @ w_proj, *replicated) + b_proj)
    logits = xp.reshape(layer_norm(x, lnf_w, lnf_b), (tokens, dim)) @ xp.transpose(wte)
    shifted = logits - xp.max(logits, axis=1, keepdims=True)
    sum_exp = xp.sum(xp.exp(shifted), axis=1, keepdims=True)
    target = constrain(xp.take_along_axis(shifted, c["TARGETS"], axis=1), None, None)
    return xp.mean(xp.log(sum_exp) - target)


_GPT2_SHAPES = ((256, 64), (8, 64), (64,), (64,), *((64, 64), (64,)) * 3, (64, 64), (64,))
_GPT2_SHAPES += ((64,), (64,), (64, 256), (256,), (256, 64), (64,), (64,), (64,))
_GPT2_SPECS = (("tp", None), (None, None), (None,), (None,))
_GPT2_SPECS += ((None, "tp"), ("tp",)) * 3 + (("tp", None), (None,), (None,), (None,))
_GPT2_SPECS += ((None, "tp"), ("tp",), ("tp", None), (None,), (None,), (None,))

_LLAMA_SHAPES = ((2, 8, 64), (64,), (64, 64), (64, 64), (64, 64), (64, 64), (64,))
_LLAMA_SHAPES += ((64, 128), (64, 128), (128, 64))
_COLUMN, _ROW = (None, "tp"), ("tp", None)
_LLAMA_WEIGHT_SPECS = ((None,), _COLUMN, _COLUMN, _COLUMN, _ROW, (None,), _COLUMN, _COLUMN, _ROW)

EXAMPLES = (
    ShardedExample(
        "row_parallel_matmul",
        "def entry(x: Tensor[(32, 256 @ TP.tp), 'f32'], w: Tensor[(256 @ TP.tp, 128), 'f32']):\n"
        "    return tf.reshard(x @ w, layout=TP_REPLICATED_32x128, storage='gmem')\n",
        ((32, 256), (256, 128)),
        "tp",
        ((None, "tp"), ("tp", None)),
        (None, None),
        lambda xp, x, w: x @ w,
    ),
    ShardedExample(
        "matmul_reduce_scatter",
        "def entry(x: Tensor[(32, 256 @ TP.tp), 'f32'], w: Tensor[(256 @ TP.tp, 128), 'f32']):\n"
        "    return tf.reshard(x @ w, layout=(32 @ TP.tp, 128), storage='gmem')\n",
        ((32, 256), (256, 128)),
        "tp",
        ((None, "tp"), ("tp", None)),
        ("tp", None),
        lambda xp, x, w: x @ w,
    ),
    ShardedExample(
        "sequence_parallel_mlp",
        "def entry(x: Tensor[(32 @ TP.tp, 64), 'f32'], w1: Tensor[(64, 256 @ TP.tp), 'f32'],\n"
        "          w2: Tensor[(256 @ TP.tp, 64), 'f32']):\n"
        "    full = tf.reshard(x, layout=TP_REPLICATED_32x64, storage='gmem')\n"
        "    partial = tf.silu(full @ w1) @ w2\n"
        "    return tf.reshard(partial, layout=(32 @ TP.tp, 64), storage='gmem')\n",
        ((32, 64), (64, 256), (256, 64)),
        "tp",
        (("tp", None), (None, "tp"), ("tp", None)),
        ("tp", None),
        lambda xp, x, w1, w2: _silu(xp, x @ w1) @ w2,
    ),
    ShardedExample(
        "tensor_parallel_mlp",
        "def entry(x: Tensor[(32, 128), 'f32'], w1: Tensor[(128, 512 @ TP.tp), 'f32'],\n"
        "          w2: Tensor[(512 @ TP.tp, 128), 'f32']):\n"
        "    partial = tf.silu(x @ w1) @ w2\n"
        "    return tf.reshard(partial, layout=TP_REPLICATED_32x128, storage='gmem')\n",
        ((32, 128), (128, 512), (512, 128)),
        "tp",
        ((None, None), (None, "tp"), ("tp", None)),
        (None, None),
        lambda xp, x, w1, w2: _silu(xp, x @ w1) @ w2,
    ),
    ShardedExample(
        "row_sum_over_split_axis",
        "def entry(x: Tensor[(64, 1024 @ TP.tp), 'f32']):\n"
        "    return tf.reduce(x, axes=(1,), keepdim=False, kind='sum')\n",
        ((64, 1024),),
        "tp",
        ((None, "tp"),),
        (None,),
        lambda xp, x: xp.sum(x, axis=1),
    ),
    ShardedExample(
        "gather_2d_then_exp",
        "def entry(x: Tensor[(64 @ M2.x, 128 @ M2.y), 'f32']):\n"
        "    return tf.exp(tf.reshard(x, layout=M2_REPLICATED_64x128, storage='gmem'))\n",
        ((64, 128),),
        "2d",
        (("x", "y"),),
        (None, None),
        lambda xp, x: xp.exp(x),
    ),
    ShardedExample(
        "rows_to_columns",
        "def entry(x: Tensor[(64 @ TP.tp, 128), 'f32']):\n"
        "    return tf.exp(tf.reshard(x, layout=(64, 128 @ TP.tp), storage='gmem'))\n",
        ((64, 128),),
        "tp",
        (("tp", None),),
        (None, "tp"),
        lambda xp, x: xp.exp(x),
    ),
    ShardedExample(
        "matmul_2d_no_communication",
        "def entry(x: Tensor[(64 @ M2.x, 128), 'f32'], w: Tensor[(128, 256 @ M2.y), 'f32']):\n"
        "    return x @ w\n",
        ((64, 128), (128, 256)),
        "2d",
        (("x", None), (None, "y")),
        ("x", "y"),
        lambda xp, x, w: x @ w,
    ),
    ShardedExample(
        "llama_tp_layer",
        "",
        _LLAMA_SHAPES,
        "tp",
        ((None, None, None), *_LLAMA_WEIGHT_SPECS),
        (None, None, None),
        lambda xp, *a, constrain: _llama_layer(
            xp, *a, gathered=(), residual=(None, None, None), constrain=constrain
        ),
        example="llama_tp",
    ),
    ShardedExample(
        "llama_sp_layer",
        "",
        _LLAMA_SHAPES,
        "tp",
        ((None, "tp", None), *_LLAMA_WEIGHT_SPECS),
        (None, "tp", None),
        lambda xp, *a, constrain: _llama_layer(
            xp, *a, gathered=(None, None, None), residual=(None, "tp", None), constrain=constrain
        ),
        example="llama_sp",
    ),
    ShardedExample(
        "moe_expert_parallel",
        "",
        _MOE_SHAPES,
        "tp",
        (("tp", None, None), (None, None), *(("tp", None, None),) * 3),
        ("tp", None, None),
        _moe_layer,
        example="moe_layer",
        file="moe.py",
    ),
    ShardedExample(
        "gpt2_vocab_parallel_loss",
        "",
        _GPT2_SHAPES,
        "tp",
        _GPT2_SPECS,
        (),
        _gpt2_loss,
        example="gpt2_batch",
        file="gpt2.py",
        activations=0,
    ),
)


HLO_INSTRUCTION = re.compile(r"%([\w.-]+) = (\([^()]*\)|\S+) ([a-z][\w-]*)\(([^()]*)\)")
HLO_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
HLO_BYTES = {"f64": 8, "f32": 4, "s32": 4, "u32": 4, "bf16": 2, "f16": 2, "s8": 1, "pred": 1}


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape: an array `f32[8,128]{1,0}` or a tuple of them."""
    return sum(
        HLO_BYTES[dtype] * prod(int(d) for d in dims.split(",") if d)
        for dtype, dims in HLO_ARRAY.findall(shape)
    )


def hlo_collectives(hlo_text: str) -> list[dict[str, Any]]:
    """Every collective instruction of a compiled (per-device) HLO module, with operand bytes
    (`bytes`: what each device puts in) and result bytes (`out_bytes`: what it gets back).
    Compiled HLO names its operands without their shapes, so every instruction's result shape is
    recorded first; an async pair counts once, at its `-start` (whose result tuple ends with the
    collective's result)."""
    instructions = HLO_INSTRUCTION.findall(hlo_text)
    shapes = {name: shape for name, shape, _, _ in instructions}
    found = []
    for _, shape, opcode, operands in instructions:
        kind = opcode.removesuffix("-start")
        if kind in COLLECTIVES:
            names = re.findall(r"%([\w.-]+)", operands)
            arrays = HLO_ARRAY.findall(shape)
            result = shape_bytes("{}[{}]".format(*arrays[-1])) if opcode != kind else None
            found.append(
                {
                    "kind": kind,
                    "bytes": sum(shape_bytes(shapes[n]) for n in names),
                    "out_bytes": result if result is not None else shape_bytes(shape),
                }
            )
    return found


HLO_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.-]+) .*\{$")
HLO_WHILE = re.compile(r"body=%([\w.-]+).*\"known_trip_count\":\{\"n\":\"(\d+)\"")
HLO_CALLED = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)=\{?%([\w.-]+)")


def hlo_collective_executions(hlo_text: str) -> list[dict[str, Any]]:
    """Every collective instruction of a compiled (per-device) HLO module, as `hlo_collectives`
    gives it, with `operand_bytes` (one entry per operand: XLA's combiner may merge several
    tensors' all-reduces into one instruction), `executions` per run of the module (the product
    of the known trip counts of the `while` loops around it) and `in_loop`."""
    computations: dict[str, list[str]] = {}
    entry, lines = None, None
    for line in hlo_text.splitlines():
        header = HLO_COMPUTATION.match(line)
        if header:
            lines = computations.setdefault(header.group(1), [])
            entry = header.group(1) if line.startswith("ENTRY") else entry
        elif line.startswith("}"):
            lines = None
        elif lines is not None:
            lines.append(line)
    shapes = {name: shape for name, shape, _, _ in HLO_INSTRUCTION.findall(hlo_text)}
    found: list[dict[str, Any]] = []

    def visit(name: str, executions: int, in_loop: bool) -> None:
        for line in computations.get(name, []):
            looped = HLO_WHILE.search(line)
            for called in HLO_CALLED.findall(line):
                trips = int(looped.group(2)) if looped and called == looped.group(1) else 1
                visit(called, executions * trips, in_loop or looped is not None)
            for _, _, opcode, operands in HLO_INSTRUCTION.findall(line):
                kind = opcode.removesuffix("-start")
                if kind in COLLECTIVES:
                    names = re.findall(r"%([\w.-]+)", operands)
                    found.append(
                        {
                            "kind": kind,
                            "operand_bytes": [shape_bytes(shapes[n]) for n in names],
                            "executions": executions,
                            "in_loop": in_loop,
                        }
                    )

    if entry is not None:
        visit(entry, 1, False)
    return found


def parse_example(example: ShardedExample) -> Any:
    from tilefoundry.frontend import parse_source

    if example.example is not None:
        return _example_namespace(example.file)[example.example]
    from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

    tp, m2 = make_mesh((8,), ("tp",)), make_mesh((2, 4), ("x", "y"))
    namespace = {  # a replicated target is spelled as a ShardLayout: sugar has no "no split"
        "TP": tp,
        "M2": m2,
        "TP_REPLICATED_32x128": ShardLayout(Layout((32, 128)), (B,), tp),
        "TP_REPLICATED_32x64": ShardLayout(Layout((32, 64)), (B,), tp),
        "M2_REPLICATED_64x128": ShardLayout(Layout((64, 128)), (B, B), m2),
    }
    source = (
        "from tilefoundry.dsl import tf\nfrom tilefoundry.frontend import Tensor, func\n\n"
        f"@func\n{example.dsl}"
    )
    return parse_source(source, f"<{example.name}>", namespace)["entry"]


def ours(fn: Any, example: ShardedExample) -> tuple[list[dict[str, Any]] | str, Any]:
    """Our collectives (one entry per collective) and our result on the 8 devices, or the
    refusal's text (and no result) where the SPMD exit cannot lower the program yet."""
    from tilefoundry.errors import UnsupportedError
    from tilefoundry.exits.runtimes.xla import run_xla

    try:
        return _our_collectives(fn), run_xla(fn, *example.arguments(), devices=8)
    except UnsupportedError as err:
        return f"refused: {err.message}", None


def _our_collectives(fn: Any) -> list[dict[str, Any]]:
    from tilefoundry.exits.stablehlo.spmd import collective_report

    return [
        {
            "kind": e.kind.replace("_", "-"),
            "axes": e.mesh_axes,
            "bytes": e.bytes_per_device,
            "out_bytes": e.result_bytes_per_device,
        }
        for e in collective_report(fn)
        for _ in range(e.count)
    ]


def jax_partitioned(example: ShardedExample, meshes: dict[str, Any]) -> tuple[list, Any]:
    """JAX's collectives for the same in/out shardings, and its result gathered to the host."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = meshes[example.mesh]
    ins = tuple(NamedSharding(mesh, PartitionSpec(*s)) for s in example.in_specs)
    out = NamedSharding(mesh, PartitionSpec(*example.out_spec))

    def constrain(value: Any, *spec: str | None) -> Any:
        return jax.lax.with_sharding_constraint(value, NamedSharding(mesh, PartitionSpec(*spec)))

    def array_code(*a: Any) -> Any:
        if example.example is None:
            return example.array_fn(jnp, *a)
        return example.array_fn(jnp, *a, constrain=constrain)

    jitted = jax.jit(array_code, in_shardings=ins, out_shardings=out)
    arrays = [jax.device_put(a, s) for a, s in zip(example.arguments(), ins, strict=True)]
    compiled = jitted.lower(*arrays).compile()
    return hlo_collectives(compiled.as_text()), np.asarray(compiled(*arrays))


def device_side(examples: tuple[ShardedExample, ...], out_file: Path) -> None:
    """Runs with 8 host devices: check the three results agree, then record both sides."""
    import jax
    from jax.sharding import Mesh

    devices = np.array(jax.devices())
    meshes = {"tp": Mesh(devices, ("tp",)), "2d": Mesh(devices.reshape(2, 4), ("x", "y"))}
    rows = []
    for example in examples:
        fn = parse_example(example)
        our_collectives, our_result = ours(fn, example)
        jax_collectives, jax_result = jax_partitioned(example, meshes)
        reference = _reference(fn, example)
        errors = {}
        sides = (("ours", our_result), ("jax", jax_result))
        for side, result in (s for s in sides if s[1] is not None):
            same, errors[side] = allclose(result, reference)
            if not same:
                raise SystemExit(f"{example.name}: {side} differs from the reference evaluator")
        rows.append(
            {
                "program": example.name,
                "mesh": "8 (tp)" if example.mesh == "tp" else "2x4 (x, y)",
                "ours": our_collectives,
                "jax": jax_collectives,
                "ours_bytes_per_device": None
                if isinstance(our_collectives, str)
                else sum(c["bytes"] for c in our_collectives),
                "jax_bytes_per_device": sum(c["bytes"] for c in jax_collectives),
                "ours_out_bytes_per_device": None
                if isinstance(our_collectives, str)
                else sum(c["out_bytes"] for c in our_collectives),
                "jax_out_bytes_per_device": sum(c["out_bytes"] for c in jax_collectives),
                "max_relative_error": errors,
            }
        )
    out_file.write_text(json.dumps(rows))


def _reference(fn: Any, example: ShardedExample) -> Any:
    """The reference evaluator's simulation of the mesh; where it refuses the program (issue
    15's pending simulator fix), the array code itself in float64 numpy."""
    from tilefoundry.errors import VerifyError
    from tilefoundry.evaluator import evaluate

    try:
        return evaluate(fn, *example.arguments())
    except VerifyError:
        arrays = [a.astype(np.float64) for a in example.arguments()]
        if example.example is None:
            return example.array_fn(np, *arrays)
        return example.array_fn(np, *arrays, constrain=lambda value, *_: value)


def run_device_side(quick: bool) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {DEVICE_FLAG}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        out_file = Path(scratch) / "rows.json"
        command = [sys.executable, __file__, "--device-side", str(out_file)]
        subprocess.run([*command, *(["--quick"] if quick else [])], env=env, check=True)
        return json.loads(out_file.read_text())


def summarise(collectives: list[dict[str, Any]] | str) -> str:
    if isinstance(collectives, str):
        return collectives
    if not collectives:
        return "none"
    return ", ".join(
        f"{c['kind']}{'[' + c['axes'] + ']' if 'axes' in c else ''} "
        f"{c['bytes']} -> {c['out_bytes']} B"
        for c in collectives
    )


def main() -> None:
    parser = standard_arguments(__doc__.splitlines()[0])
    parser.add_argument("--device-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    examples = EXAMPLES[:2] if args.quick else EXAMPLES
    if args.device_side is not None:
        device_side(examples, args.device_side)
        return
    rows = run_device_side(args.quick)
    table = markdown_table(
        [
            "program",
            "mesh",
            "ours (collective_report)",
            "ours B/dev in",
            "ours B/dev out",
            "JAX",
            "JAX B/dev in",
            "JAX B/dev out",
        ],
        [
            [
                r["program"],
                r["mesh"],
                summarise(r["ours"]),
                "-" if r["ours_bytes_per_device"] is None else r["ours_bytes_per_device"],
                "-" if r["ours_out_bytes_per_device"] is None else r["ours_out_bytes_per_device"],
                summarise(r["jax"]),
                r["jax_bytes_per_device"],
                r["jax_out_bytes_per_device"],
            ]
            for r in rows
        ],
    )
    print(
        "\ncollectives with operand -> result bytes per device (what each device puts in and "
        "gets back), same in/out shardings, 8 CPU devices"
    )
    print(table)
    path = write_results(args.out, "communication", {"rows": rows, "table": table})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
