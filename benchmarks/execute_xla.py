"""Execution time on XLA (CPU): our StableHLO through `run_xla` vs `jax.jit` of the same program
written in jax.numpy, same float32 inputs, ratio of medians after warm-up.

Both sides take the same numpy arrays and hand back numpy arrays, so each timed call includes the
host-to-device copy of the inputs, the XLA execution and the copy of the result back; neither
includes compilation (the first call of each side compiles and is excluded as warm-up; run_xla
caches the executable per shapes, jax.jit per function). Our module is the fused one that
`tilefoundry.passes.compile` produces. Before timing, both results are checked with `allclose`.

A second pair of columns times the compiled code alone: the inputs already on the device, the
jitted function run_xla calls (a cached `jax.jit` of a `jax.export.Exported` of our module,
`exits.runtimes.xla_jit.jax_function`) and `jax.jit`, both called on device arrays through the same
C++ dispatch, each waiting for its result to be ready. The gap between the two pairs is the per-call
cost of `run_xla` itself (its cache look-up, copying arguments in, results out), the rest is the
quality of the code XLA builds from each module.

The 8-device table does the same for sharded programs on 8 CPU devices (in a subprocess started
with `XLA_FLAGS=--xla_force_host_platform_device_count=8`; this process keeps one device):
`run_xla(fn, *arrays, devices=8)` of our SPMD module vs `jax.jit` of the array code with the same
NamedSharding in/out shardings (and `with_sharding_constraint` where the DSL reshards), both numpy
in and numpy out (global arrays: each side cuts and places the blocks, and gathers the result);
the resident pair calls the two jitted functions on arguments already placed by those shardings.
Programs: `(a + b) * c - d` on four 16x16 arguments split by rows, an elementwise chain split by
rows, the Megatron MLP and the tensor-parallel Llama layer of examples/llama.py (the latter two
as benchmarks/communication.py defines them).
Run: `python benchmarks/execute_xla.py`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax
import jax.numpy as jnp
import numpy as np
from _programs import allclose, example_programs, four_arguments, parse_program
from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    run_device_side,
    standard_arguments,
    write_results,
)

from tilefoundry.exits.runtimes.xla import compiled_text, run_xla
from tilefoundry.exits.runtimes.xla_jit import jax_function
from tilefoundry.passes import compile as compile_fn

DEVICES = 8


def device_resident_pair(fused, jitted, arrays):
    """The jitted function run_xla calls and jax.jit, each called on inputs already placed on
    the CPU device."""
    ours_jitted = jax_function(compiled_text(fused, *arrays)).call
    placed = [jax.device_put(a, jax.devices("cpu")[0]) for a in arrays]

    def ours():
        return [o.block_until_ready() for o in ours_jitted(*placed)]

    def peer():
        return jitted(*placed).block_until_ready()

    return ours, peer


def geometric_mean(ratios: list[float]) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


def timed_row(name, inputs, ours, peer, resident_ours, resident_peer, args, repeats):
    """Both pairs checked with `allclose`, then timed interleaved: one row of a table."""
    same, error = allclose(ours(), peer())
    if not same:
        raise SystemExit(f"{name}: results differ (max relative error {error:.2e})")
    same, _ = allclose(np.asarray(resident_ours()[0]), np.asarray(resident_peer()))
    if not same:
        raise SystemExit(f"{name}: device-resident results differ")
    min_sample_s = 0.0 if args.quick else 0.02
    ours_s, peer_s = interleaved_medians(ours, peer, repeats, min_sample_s=min_sample_s)
    code_ours_s, code_peer_s = interleaved_medians(
        resident_ours, resident_peer, repeats, min_sample_s=min_sample_s
    )
    print(f"{name}: {ours_s * 1e6:.0f} µs vs {peer_s * 1e6:.0f} µs", flush=True)
    return {
        "program": name,
        "inputs": inputs,
        "ours_s": ours_s,
        "jax_s": peer_s,
        "ratio": ours_s / peer_s,
        "ours_device_resident_s": code_ours_s,
        "jax_device_resident_s": code_peer_s,
        "device_resident_ratio": code_ours_s / code_peer_s,
        "max_relative_error": error,
    }


def one_device_rows(args, repeats):
    rows = []
    for program in [four_arguments(16), *example_programs(args.quick)]:
        arrays = program.arguments()
        fused, _ = compile_fn(parse_program(program))
        jitted = jax.jit(lambda *a, p=program: p.array_fn(jnp, *a))

        def ours(fused=fused, arrays=arrays):
            return run_xla(fused, *arrays)

        def peer(jitted=jitted, arrays=arrays):
            return np.asarray(jitted(*arrays))

        resident = device_resident_pair(fused, jitted, arrays)
        inputs = [list(shape) for _, shape in program.params]
        rows.append(timed_row(program.name, inputs, ours, peer, *resident, args, repeats))
    return rows


def sharded_examples(quick: bool):
    """The 8-device programs (benchmarks/communication.py's `ShardedExample`s)."""
    from communication import EXAMPLES, ShardedExample

    split = ("tp", None)
    four = ShardedExample(
        "four_arguments_split8",
        "def entry(a: Tensor[(16 @ TP.tp, 16), 'f32'], b: Tensor[(16 @ TP.tp, 16), 'f32'],\n"
        "          c: Tensor[(16 @ TP.tp, 16), 'f32'], d: Tensor[(16 @ TP.tp, 16), 'f32']):\n"
        "    return (a + b) * c - d\n",
        ((16, 16),) * 4,
        "tp",
        (split,) * 4,
        split,
        lambda xp, a, b, c, d: (a + b) * c - d,
    )
    chain = ShardedExample(
        "elementwise_chain_split8",
        "def entry(x: Tensor[(512 @ TP.tp, 512), 'f32'], y: Tensor[(512 @ TP.tp, 512), 'f32']):\n"
        "    return tf.exp(x * y + y) - x\n",
        ((512, 512),) * 2,
        "tp",
        (split,) * 2,
        split,
        lambda xp, x, y: xp.exp(x * y + y) - x,
    )
    named = {e.name: e for e in EXAMPLES}
    if quick:
        return (four,)
    return (four, chain, named["tensor_parallel_mlp"], named["llama_tp_layer"])


def eight_device_rows(args, repeats):
    """Runs in the subprocess with 8 host devices."""
    from communication import parse_example
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from tilefoundry.exits.runtimes.xla_spmd import spmd_function

    devices = np.array(jax.devices("cpu")[:DEVICES])
    meshes = {"tp": Mesh(devices, ("tp",)), "2d": Mesh(devices.reshape(2, 4), ("x", "y"))}
    rows = []
    for example in sharded_examples(args.quick):
        arrays = example.arguments()
        fused, _ = compile_fn(parse_example(example))
        mesh = meshes[example.mesh]
        ins = tuple(NamedSharding(mesh, PartitionSpec(*spec)) for spec in example.in_specs)
        out = NamedSharding(mesh, PartitionSpec(*example.out_spec))

        def constrain(value, *spec, mesh=mesh):
            return jax.lax.with_sharding_constraint(
                value, NamedSharding(mesh, PartitionSpec(*spec))
            )

        def array_code(*a, example=example, constrain=constrain):
            if example.example is None:
                return example.array_fn(jnp, *a)
            return example.array_fn(jnp, *a, constrain=constrain)

        jitted = jax.jit(array_code, in_shardings=ins, out_shardings=out)

        def ours(fused=fused, arrays=arrays):
            return run_xla(fused, *arrays, devices=DEVICES)

        def peer(jitted=jitted, arrays=arrays):
            return np.asarray(jitted(*arrays))

        ours_jitted = spmd_function(fused, DEVICES, {}).call
        placed = [jax.device_put(a, s) for a, s in zip(arrays, ins, strict=True)]

        def resident_ours(call=ours_jitted, placed=placed):
            return [o.block_until_ready() for o in call(*placed)]

        def resident_peer(jitted=jitted, placed=placed):
            return jitted(*placed).block_until_ready()

        inputs = [list(shape) for shape in example.shapes]
        resident = (resident_ours, resident_peer)
        rows.append(timed_row(example.name, inputs, ours, peer, *resident, args, repeats))
    return rows


def table_of(rows):
    return markdown_table(
        [
            "program",
            "first input",
            "run_xla µs",
            "jax.jit µs",
            "ratio",
            "ours resident µs",
            "jax resident µs",
            "resident ratio",
            "max rel err",
        ],
        [
            [
                r["program"],
                "x".join(map(str, r["inputs"][0])),
                f"{r['ours_s'] * 1e6:.0f}",
                f"{r['jax_s'] * 1e6:.0f}",
                f"{r['ratio']:.2f}x",
                f"{r['ours_device_resident_s'] * 1e6:.0f}",
                f"{r['jax_device_resident_s'] * 1e6:.0f}",
                f"{r['device_resident_ratio']:.2f}x",
                f"{r['max_relative_error']:.1e}",
            ]
            for r in rows
        ],
    )


def main() -> None:
    parser = standard_arguments(__doc__.splitlines()[0])
    parser.add_argument("--device-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = repeats_for(args, 15)
    if args.device_side is not None:
        args.device_side.write_text(json.dumps(eight_device_rows(args, repeats)))
        return
    rows = one_device_rows(args, repeats)
    rows8 = run_device_side(__file__, args, repeats, DEVICES)
    table, table8 = table_of(rows), table_of(rows8)
    geomean = geometric_mean([r["ratio"] for r in rows])
    resident_geomean = geometric_mean([r["device_resident_ratio"] for r in rows])
    geomean8 = geometric_mean([r["ratio"] for r in rows8])
    resident_geomean8 = geometric_mean([r["device_resident_ratio"] for r in rows8])
    print(f"\nrun_xla (our StableHLO) vs jax.jit, float32 on CPU, median of {repeats}")
    print(table)
    print(
        f"geometric mean ratio: {geomean:.2f}x with copies in and out, "
        f"{resident_geomean:.2f}x device-resident"
    )
    print(f"\nrun_xla(..., devices={DEVICES}) vs jax.jit with the same NamedShardings")
    print(table8)
    print(
        f"geometric mean ratio: {geomean8:.2f}x with copies in and out, "
        f"{resident_geomean8:.2f}x device-resident"
    )
    path = write_results(
        args.out,
        "execute_xla",
        {
            "repeats": repeats,
            "rows": rows,
            "geomean_ratio": geomean,
            "device_resident_geomean_ratio": resident_geomean,
            "table": table,
            "rows_8_devices": rows8,
            "geomean_ratio_8_devices": geomean8,
            "device_resident_geomean_ratio_8_devices": resident_geomean8,
            "table_8_devices": table8,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
