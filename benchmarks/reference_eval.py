"""The reference evaluator's speed: `tilefoundry.evaluator.evaluate` vs the same program written
by hand in numpy, same float32 inputs, ratio of medians after warm-up.

The evaluator is the oracle every test compares against, so what matters is its overhead over the
numpy it calls underneath: checking and placing inputs, walking the IR, checking each op's result
against its type. Both sides run the parsed (unfused) program on numpy arrays and return numpy
arrays; both are checked with `allclose` before timing.
Run: `python benchmarks/reference_eval.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import numpy as np
from _programs import allclose, example_programs, parse_program
from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    standard_arguments,
    write_results,
)

from tilefoundry.evaluator import evaluate
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import post_order


def main() -> None:
    args = standard_arguments(__doc__.splitlines()[0]).parse_args()
    repeats = repeats_for(args, 9)
    rows = []
    for program in example_programs(args.quick):
        arrays = program.arguments()
        fn = parse_program(program)

        def ours(fn=fn, arrays=arrays):
            return evaluate(fn, *arrays)

        def peer(program=program, arrays=arrays):
            return program.array_fn(np, *arrays)

        same, error = allclose(ours(), peer())
        if not same:
            raise SystemExit(f"{program.name}: results differ (max relative error {error:.2e})")
        ours_s, peer_s = interleaved_medians(
            ours, peer, repeats, min_sample_s=0.0 if args.quick else 0.02
        )
        ops = sum(isinstance(n, Call) for n in post_order((fn.body,)))
        rows.append(
            {
                "program": program.name,
                "inputs": [list(shape) for _, shape in program.params],
                "hir_ops": ops,
                "ours_s": ours_s,
                "numpy_s": peer_s,
                "ratio": ours_s / peer_s,
                "overhead_us_per_op": (ours_s - peer_s) / ops * 1e6,
                "max_relative_error": error,
            }
        )
        print(f"{program.name}: {ours_s * 1e6:.0f} µs vs {peer_s * 1e6:.0f} µs", flush=True)
    table = markdown_table(
        [
            "program",
            "first input",
            "HIR ops",
            "evaluate µs",
            "numpy µs",
            "ratio",
            "overhead µs/op",
            "max rel err",
        ],
        [
            [
                r["program"],
                "x".join(map(str, r["inputs"][0])),
                r["hir_ops"],
                f"{r['ours_s'] * 1e6:.0f}",
                f"{r['numpy_s'] * 1e6:.0f}",
                f"{r['ratio']:.2f}x",
                f"{r['overhead_us_per_op']:.0f}",
                f"{r['max_relative_error']:.1e}",
            ]
            for r in rows
        ],
    )
    print(f"\nreference evaluator vs hand-written numpy, float32, median of {repeats}")
    print(table)
    path = write_results(
        args.out, "reference_eval", {"repeats": repeats, "rows": rows, "table": table}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
