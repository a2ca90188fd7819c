"""Communication of sharded programs on 8 devices: the collectives and bytes per device our
SPMD lowering emits vs what JAX's automatic partitioner emits given the same input and output
shardings.

Our side is `tilefoundry.exits.spmd.collective_report`: the collectives the SPMD exit writes into
the module (it partitions manually, so XLA adds none), each with its operand and result bytes
per device.
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

    def arguments(self) -> list[np.ndarray]:
        rng = np.random.default_rng(0)
        return [rng.standard_normal(s).astype(np.float32) for s in self.shapes]


def _silu(xp: Any, x: Any) -> Any:
    return x * (1.0 / (1.0 + xp.exp(-x)))


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


def parse_example(example: ShardedExample) -> Any:
    from tilefoundry.frontend import parse_source
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


def ours(fn: Any, example: ShardedExample) -> tuple[list[dict[str, Any]], Any]:
    """Our collectives (one entry per collective) and our result on the 8 devices."""
    from tilefoundry.exits.spmd import collective_report
    from tilefoundry.exits.xla import run_xla

    collectives = [
        {
            "kind": e.kind.replace("_", "-"),
            "axes": e.mesh_axes,
            "bytes": e.bytes_per_device,
            "out_bytes": e.result_bytes_per_device,
        }
        for e in collective_report(fn)
        for _ in range(e.count)
    ]
    return collectives, run_xla(fn, *example.arguments(), devices=8)


def jax_partitioned(example: ShardedExample, meshes: dict[str, Any]) -> tuple[list, Any]:
    """JAX's collectives for the same in/out shardings, and its result gathered to the host."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = meshes[example.mesh]
    ins = tuple(NamedSharding(mesh, PartitionSpec(*s)) for s in example.in_specs)
    out = NamedSharding(mesh, PartitionSpec(*example.out_spec))
    jitted = jax.jit(lambda *a: example.array_fn(jnp, *a), in_shardings=ins, out_shardings=out)
    arrays = [jax.device_put(a, s) for a, s in zip(example.arguments(), ins, strict=True)]
    compiled = jitted.lower(*arrays).compile()
    return hlo_collectives(compiled.as_text()), np.asarray(compiled(*arrays))


def device_side(examples: tuple[ShardedExample, ...], out_file: Path) -> None:
    """Runs with 8 host devices: check the three results agree, then record both sides."""
    import jax
    from jax.sharding import Mesh

    from tilefoundry.evaluator import evaluate

    devices = np.array(jax.devices())
    meshes = {"tp": Mesh(devices, ("tp",)), "2d": Mesh(devices.reshape(2, 4), ("x", "y"))}
    rows = []
    for example in examples:
        fn = parse_example(example)
        our_collectives, our_result = ours(fn, example)
        jax_collectives, jax_result = jax_partitioned(example, meshes)
        reference = evaluate(fn, *example.arguments())
        errors = {}
        for side, result in (("ours", our_result), ("jax", jax_result)):
            same, errors[side] = allclose(result, reference)
            if not same:
                raise SystemExit(f"{example.name}: {side} differs from the reference evaluator")
        rows.append(
            {
                "program": example.name,
                "mesh": "8 (tp)" if example.mesh == "tp" else "2x4 (x, y)",
                "ours": our_collectives,
                "jax": jax_collectives,
                "ours_bytes_per_device": sum(c["bytes"] for c in our_collectives),
                "jax_bytes_per_device": sum(c["bytes"] for c in jax_collectives),
                "ours_out_bytes_per_device": sum(c["out_bytes"] for c in our_collectives),
                "jax_out_bytes_per_device": sum(c["out_bytes"] for c in jax_collectives),
                "max_relative_error": errors,
            }
        )
    out_file.write_text(json.dumps(rows))


def run_device_side(quick: bool) -> list[dict[str, Any]]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {DEVICE_FLAG}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory() as scratch:
        out_file = Path(scratch) / "rows.json"
        command = [sys.executable, __file__, "--device-side", str(out_file)]
        subprocess.run([*command, *(["--quick"] if quick else [])], env=env, check=True)
        return json.loads(out_file.read_text())


def summarise(collectives: list[dict[str, Any]]) -> str:
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
                r["ours_bytes_per_device"],
                r["ours_out_bytes_per_device"],
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
