"""Execution time on XLA (CPU): our StableHLO through `run_xla` vs `jax.jit` of the same program
written in jax.numpy, same float32 inputs, ratio of medians after warm-up.

Both sides take the same numpy arrays and hand back numpy arrays, so each timed call includes the
host-to-device copy of the inputs, the XLA execution and the copy of the result back; neither
includes compilation (the first call of each side compiles and is excluded as warm-up; run_xla
caches the executable per shapes, jax.jit per function). Our module is the fused one that
`tilefoundry.passes.compile` produces. Before timing, both results are checked with `allclose`.

A second pair of columns times the compiled code alone: the inputs already on the device, our
module's executable (compiled from `compiled_text` for one CPU device; run_xla itself calls the
same module through a cached `jax.jit` of a `jax.export.Exported`) called directly and
`jax.jit` called on device arrays, each waiting for its result to be ready. The gap
between the two pairs is the per-call cost of `run_xla` itself (copying arguments in, results
out), the rest is the quality of the code XLA builds from each module.
Run: `python benchmarks/execute_xla.py`.
"""

from __future__ import annotations

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
    standard_arguments,
    write_results,
)

from tilefoundry.exits.xla import compiled_text, run_xla
from tilefoundry.passes import compile as compile_fn


def device_resident_pair(fused, jitted, arrays):
    """Our executable and jax.jit, each called on inputs already placed on the CPU device."""
    from jax.extend import backend

    cpu = backend.get_backend("cpu")
    options = backend.get_compile_options(num_replicas=1, num_partitions=1)
    executable = cpu.compile_and_load(compiled_text(fused, *arrays), cpu.devices()[:1], options)
    placed = [jax.device_put(a, cpu.devices()[0]) for a in arrays]

    def ours():
        return [o.block_until_ready() for o in executable.execute(placed)]

    def peer():
        return jitted(*placed).block_until_ready()

    return ours, peer


def geometric_mean(ratios: list[float]) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


def main() -> None:
    args = standard_arguments(__doc__.splitlines()[0]).parse_args()
    repeats = repeats_for(args, 15)
    rows = []
    for program in [four_arguments(16), *example_programs(args.quick)]:
        arrays = program.arguments()
        fused, _ = compile_fn(parse_program(program))
        jitted = jax.jit(lambda *a, p=program: p.array_fn(jnp, *a))

        def ours(fused=fused, arrays=arrays):
            return run_xla(fused, *arrays)

        def peer(jitted=jitted, arrays=arrays):
            return np.asarray(jitted(*arrays))

        same, error = allclose(ours(), peer())
        if not same:
            raise SystemExit(f"{program.name}: results differ (max relative error {error:.2e})")
        min_sample_s = 0.0 if args.quick else 0.02
        ours_s, peer_s = interleaved_medians(ours, peer, repeats, min_sample_s=min_sample_s)
        resident_ours, resident_peer = device_resident_pair(fused, jitted, arrays)
        same, _ = allclose(np.asarray(resident_ours()[0]), np.asarray(resident_peer()))
        if not same:
            raise SystemExit(f"{program.name}: device-resident results differ")
        code_ours_s, code_peer_s = interleaved_medians(
            resident_ours, resident_peer, repeats, min_sample_s=min_sample_s
        )
        rows.append(
            {
                "program": program.name,
                "inputs": [list(shape) for _, shape in program.params],
                "ours_s": ours_s,
                "jax_s": peer_s,
                "ratio": ours_s / peer_s,
                "ours_device_resident_s": code_ours_s,
                "jax_device_resident_s": code_peer_s,
                "device_resident_ratio": code_ours_s / code_peer_s,
                "max_relative_error": error,
            }
        )
        print(f"{program.name}: {ours_s * 1e6:.0f} µs vs {peer_s * 1e6:.0f} µs", flush=True)
    table = markdown_table(
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
    geomean = geometric_mean([r["ratio"] for r in rows])
    resident_geomean = geometric_mean([r["device_resident_ratio"] for r in rows])
    print(f"\nrun_xla (our StableHLO) vs jax.jit, float32 on CPU, median of {repeats}")
    print(table)
    print(
        f"geometric mean ratio: {geomean:.2f}x with copies in and out, "
        f"{resident_geomean:.2f}x device-resident"
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
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
