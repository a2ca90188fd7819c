"""Compile time, Python function to StableHLO text, for a transformer decoder of L layers:
tilefoundry vs `jax.jit(f).lower(*specs).as_text()`, with per-op cost and a linear-fit check.

Our path is the full one a user pays for: the decoder's DSL source text (generated once per L,
outside the timing) goes through `tilefoundry.frontend.parse_source` (Python compile of the text,
`@func` parse and typeinfer), then `tilefoundry.passes.compile` (legalize, verify, fuse, verify),
then `emit_stablehlo`. Generating source rather than calling `@func` layer functions from a
driver keeps the module one unrolled function, as JAX's trace of the Python loop is, so both
sides emit the same flat program. The JAX side traces a fresh closure of the same array code each
time (JAX caches traces per function object) and lowers it to StableHLO text; its Python
function already exists, so Python's compile of our source text is a cost only we pay.

Before timing, each L is checked: our StableHLO run on XLA (`run_xla`) and `jax.jit` of the
array code give the same result. Run: `python benchmarks/compile_scaling.py`
(`--layers 8 32 128` picks the depths).

`--ops 10000` is the linearity check instead, on two programs: the decoder and an elementwise
chain (`h = tf.exp(h) * y + x` repeated, one fusion region as long as the program). For each,
our per-op time at that many HIR ops against the figure at 800 ops (the decoder at L=32), and
peak memory of one compile on each side (tracemalloc, a separate untimed run) in KiB per HIR op,
next to JAX's.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax
import jax.numpy as jnp
import numpy as np
from _programs import SMALL, allclose, decoder, exp_chain, parse_program
from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    standard_arguments,
    write_results,
)

from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import post_order
from tilefoundry.passes import compile as compile_fn

LAYERS = (1, 2, 4, 8, 16, 32)
QUICK_LAYERS = (1, 2)


def hir_ops(fn) -> int:
    """The ops the program is made of after parsing: the common unit of work for both sides."""
    return sum(isinstance(n, Call) for n in post_order((fn.body,)))


def stablehlo_ops(text: str) -> int:
    return sum(" = stablehlo." in line for line in text.splitlines())


def ours_to_text(program) -> str:
    fused, _ = compile_fn(parse_program(program))
    return emit_stablehlo(fused)


def jax_to_text(program, specs) -> str:
    def f(*arrays):  # a fresh function object each call, so nothing is served from JAX's cache
        return program.array_fn(jnp, *arrays)

    return jax.jit(f).lower(*specs).as_text()


def check_same_result(program) -> float:
    """Our emitted module on XLA against jax.jit of the array code; raises if they differ."""
    arrays = program.arguments()
    fused, _ = compile_fn(parse_program(program))
    ours = run_xla(fused, *arrays)
    peer = jax.jit(lambda *a: program.array_fn(jnp, *a))(*arrays)
    same, error = allclose(ours, peer)
    if not same:
        raise SystemExit(f"{program.name}: results differ (max relative error {error:.2e})")
    return error


def stage_times(program, repeats: int) -> dict[str, float]:
    """Medians of each of our stages alone, to show where the time goes."""
    samples: dict[str, list[float]] = {"parse": [], "compile": [], "emit": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn = parse_program(program)
        t1 = time.perf_counter()
        fused, _ = compile_fn(fn)
        t2 = time.perf_counter()
        emit_stablehlo(fused)
        t3 = time.perf_counter()
        for stage, seconds in zip(samples, (t1 - t0, t2 - t1, t3 - t2), strict=True):
            samples[stage].append(seconds)
    return {stage: statistics.median(values) for stage, values in samples.items()}


def linear_fit(xs: list[float], ys: list[float]) -> dict[str, float]:
    """Least squares y = intercept + slope * x and its R^2: near 1 means cost grows linearly."""
    slope, intercept = np.polyfit(xs, ys, 1)
    predicted = intercept + slope * np.asarray(xs)
    residual = float(np.sum((np.asarray(ys) - predicted) ** 2))
    total = float(np.sum((np.asarray(ys) - np.mean(ys)) ** 2)) or 1.0
    return {
        "slope_s_per_op": float(slope),
        "intercept_s": float(intercept),
        "r2": 1 - residual / total,
    }


def peak_kib(build) -> float:
    """Peak Python memory of one `build()`, in KiB (tracemalloc; untimed)."""
    gc.collect()
    tracemalloc.start()
    try:
        build()
        return tracemalloc.get_traced_memory()[1] / 1024
    finally:
        tracemalloc.stop()


def both_to_text(program, specs, repeats: int) -> tuple[float, float]:
    """Median seconds of our path and JAX's to StableHLO text, samples interleaved."""
    return interleaved_medians(
        lambda: ours_to_text(program), lambda: jax_to_text(program, specs), repeats
    )


def linearity_programs(ops: int) -> dict[str, tuple]:
    """Per program, its 800-op and its `ops`-op form: the decoder (25 HIR ops a layer, many small
    fusion regions) and the elementwise chain (one region as long as the program)."""
    return {
        "decoder": (decoder(32, SMALL), decoder(max(ops // 25, 1), SMALL)),
        "exp_chain": (exp_chain(800), exp_chain(ops)),
    }


def linearity(args, repeats: int) -> None:
    """Per-op time and peak memory at 800 HIR ops and at `args.ops`, for each program."""
    rows, growth = [], {}
    for name, programs in linearity_programs(args.ops).items():
        for program in programs:
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in program.arguments()]
            ops = hir_ops(parse_program(program))
            ours, peer = both_to_text(program, specs, repeats)
            rows.append(
                {
                    "program": name,
                    "hir_ops": ops,
                    "ours_s": ours,
                    "jax_s": peer,
                    "ratio": ours / peer,
                    "ours_us_per_op": ours / ops * 1e6,
                    "jax_us_per_op": peer / ops * 1e6,
                    "ours_peak_kib_per_op": peak_kib(lambda p=program: ours_to_text(p)) / ops,
                    "jax_peak_kib_per_op": peak_kib(lambda p=program, s=specs: jax_to_text(p, s))
                    / ops,
                }
            )
            print(
                f"{program.name} ({ops} ops): {ours * 1e3:.0f} ms vs {peer * 1e3:.0f} ms",
                flush=True,
            )
        small, large = rows[-2], rows[-1]
        growth[name] = large["ours_us_per_op"] / small["ours_us_per_op"]
    table = markdown_table(
        ["program", "HIR ops", "ours ms", "jax ms", "ratio", "ours µs/op", "jax µs/op",
         "ours peak KiB/op", "jax peak KiB/op"],
        [
            [r["program"], r["hir_ops"], f"{r['ours_s'] * 1e3:.0f}", f"{r['jax_s'] * 1e3:.0f}",
             f"{r['ratio']:.2f}x", f"{r['ours_us_per_op']:.0f}", f"{r['jax_us_per_op']:.0f}",
             f"{r['ours_peak_kib_per_op']:.1f}", f"{r['jax_peak_kib_per_op']:.1f}"]
            for r in rows
        ],
    )  # fmt: skip
    print(f"\nLinearity, decoder {SMALL} and the exp chain, median of {repeats}")
    print(table)
    for name, figure in growth.items():
        print(f"{name}: our µs/op at about {args.ops} ops / at about 800 ops: {figure:.2f}")
    path = write_results(
        args.out,
        "compile_linearity",
        {"dims": SMALL.__dict__, "repeats": repeats, "rows": rows, "per_op_growth": growth,
         "table": table},
    )  # fmt: skip
    print(f"wrote {path}")


def main() -> None:
    parser = standard_arguments(__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", help=f"depths (default {LAYERS})")
    parser.add_argument("--ops", type=int, help="linearity check at about this many HIR ops")
    args = parser.parse_args()
    repeats = repeats_for(args, 5)
    if args.ops:
        linearity(args, repeats)
        return
    rows = []
    for layers in args.layers or (QUICK_LAYERS if args.quick else LAYERS):
        program = decoder(layers, SMALL)
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in program.arguments()]
        error = check_same_result(program)
        ops = hir_ops(parse_program(program))
        ours, peer = both_to_text(program, specs, repeats)
        stages = stage_times(program, repeats)
        rows.append(
            {
                "layers": layers,
                "hir_ops": ops,
                "stablehlo_ops_ours": stablehlo_ops(ours_to_text(program)),
                "stablehlo_ops_jax": stablehlo_ops(jax_to_text(program, specs)),
                "ours_s": ours,
                "ours_stages_s": stages,
                "jax_s": peer,
                "ratio": ours / peer,
                "ours_us_per_op": ours / ops * 1e6,
                "jax_us_per_op": peer / ops * 1e6,
                "max_relative_error": error,
            }
        )
        print(f"L={layers}: {ours * 1e3:.1f} ms vs {peer * 1e3:.1f} ms", flush=True)
    ops = [r["hir_ops"] for r in rows]
    fits = {
        side: linear_fit(ops, [r[f"{side}_s"] for r in rows]) if len(rows) > 2 else None
        for side in ("ours", "jax")
    }
    # L=4 when measured: past the fixed per-module costs
    baseline = next((r for r in rows if r["layers"] == 4), rows[0])
    growth = rows[-1]["ours_us_per_op"] / baseline["ours_us_per_op"]
    table = markdown_table(
        [
            "L",
            "HIR ops",
            "SHLO ops ours/jax",
            "parse+infer ms",
            "compile ms",
            "emit ms",
            "ours ms",
            "jax ms",
            "ratio",
            "ours µs/op",
            "jax µs/op",
        ],
        [
            [
                r["layers"],
                r["hir_ops"],
                f"{r['stablehlo_ops_ours']}/{r['stablehlo_ops_jax']}",
                f"{r['ours_stages_s']['parse'] * 1e3:.1f}",
                f"{r['ours_stages_s']['compile'] * 1e3:.1f}",
                f"{r['ours_stages_s']['emit'] * 1e3:.1f}",
                f"{r['ours_s'] * 1e3:.1f}",
                f"{r['jax_s'] * 1e3:.1f}",
                f"{r['ratio']:.2f}x",
                f"{r['ours_us_per_op']:.0f}",
                f"{r['jax_us_per_op']:.0f}",
            ]
            for r in rows
        ],
    )
    print(f"\nPython function -> StableHLO text, decoder {SMALL}, median of {repeats}")
    print(table)
    for side, fit in fits.items():
        if fit is not None:
            print(
                f"linear fit ({side}): {fit['slope_s_per_op'] * 1e6:.0f} µs/op + "
                f"{fit['intercept_s'] * 1e3:.1f} ms, R^2 = {fit['r2']:.4f}"
            )
    print(
        f"our per-op time at L={rows[-1]['layers']} / at L={baseline['layers']}: {growth:.2f} "
        "(1.00 = linear)"
    )
    path = write_results(
        args.out,
        "compile_scaling",
        {
            "dims": SMALL.__dict__,
            "repeats": repeats,
            "rows": rows,
            "linear_fit": fits,
            "per_op_growth": growth,
            "table": table,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
