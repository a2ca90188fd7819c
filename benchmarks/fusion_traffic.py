"""Memory traffic saved by fusion: bytes of intermediates our pipeline materialises before and
after `fuse`, beside the number of fusions XLA itself forms for the same program.

"Materialised intermediates" are the results of the ops in a function's top-level block that are
not the function's outputs (outputs are written whatever fusion does): before fusion every op
writes its result; after fusion only region outputs and unfused ops do. Both figures are counted
from the IR (legalized, and fused), and the difference is checked against the `saved_bytes` of
`compile`'s FusionReport. XLA's side: our emitted module, and JAX's lowering of the same program,
are compiled for CPU through `jax.extend.backend`, and the `fusion` instructions of the optimised
HLO (`get_hlo_text()` / `as_text()`) are counted. No timing, so no repeats: the figures are exact.
Run: `python benchmarks/fusion_traffic.py`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax
import jax.numpy as jnp
import numpy as np
from _programs import allclose, example_programs, parse_program
from _timing import markdown_table, standard_arguments, write_results

from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.ir.core import Call, Tuple
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order
from tilefoundry.passes import compile as compile_fn
from tilefoundry.passes import legalize
from tilefoundry.passes.graph import type_bytes

FUSION_INSTRUCTION = re.compile(r"= \S+ fusion\(")


def intermediate_bytes(fn) -> tuple[int, int]:
    """(ops, bytes) of the results written by the top-level block's ops, outputs excluded."""
    body = fn.body
    outputs = set(body.elements) if isinstance(body, Tuple) else {body}
    ops = [n for n in post_order((body,), BLOCK_OPERANDS) if isinstance(n, Call)]
    return len(ops), sum(type_bytes(n.type) or 0 for n in ops if n not in outputs)


def xla_fusions(hlo_text: str) -> int:
    return len(FUSION_INSTRUCTION.findall(hlo_text))


def our_optimised_hlo(fused, arrays) -> tuple[str, np.ndarray]:
    """XLA's optimised HLO for our emitted module, and the module's result on `arrays`."""
    from jax.extend import backend

    cpu = backend.get_backend("cpu")
    options = backend.get_compile_options(num_replicas=1, num_partitions=1)
    executable = cpu.compile_and_load(emit_stablehlo(fused), cpu.devices()[:1], options)
    placed = [jax.device_put(a, cpu.devices()[0]) for a in arrays]
    return executable.get_hlo_text(), np.asarray(executable.execute(placed)[0])


def main() -> None:
    parser = standard_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    rows = []
    for program in example_programs(args.quick):
        arrays = program.arguments()
        fn = parse_program(program)
        ops_before, before = intermediate_bytes(legalize(fn))
        fused, report = compile_fn(fn)
        ops_after, after = intermediate_bytes(fused)
        if before - after != report.saved_bytes:
            raise SystemExit(
                f"{program.name}: the IR shows {before - after} bytes saved, the FusionReport "
                f"says {report.saved_bytes}"
            )
        ours_hlo, ours_result = our_optimised_hlo(fused, arrays)
        jax_compiled = jax.jit(lambda *a, p=program: p.array_fn(jnp, *a)).lower(*arrays).compile()
        same, error = allclose(ours_result, jax_compiled(*arrays))
        if not same:
            raise SystemExit(f"{program.name}: results differ (max relative error {error:.2e})")
        rows.append(
            {
                "program": program.name,
                "inputs": [list(shape) for _, shape in program.params],
                "ops": ops_before,
                "regions": len(report.regions),
                "kernels_after_fusion": ops_after,
                "intermediate_bytes_before": before,
                "intermediate_bytes_after": after,
                "saved_fraction": report.saved_bytes / before if before else 0.0,
                "xla_fusions_our_module": xla_fusions(ours_hlo),
                "xla_fusions_jax_module": xla_fusions(jax_compiled.as_text()),
            }
        )
    table = markdown_table(
        [
            "program",
            "first input",
            "ops",
            "our regions",
            "ops after fuse",
            "intermediates before",
            "after",
            "saved",
            "XLA fusions (our module)",
            "XLA fusions (JAX's)",
        ],
        [
            [
                r["program"],
                "x".join(map(str, r["inputs"][0])),
                r["ops"],
                r["regions"],
                r["kernels_after_fusion"],
                kib(r["intermediate_bytes_before"]),
                kib(r["intermediate_bytes_after"]),
                f"{r['saved_fraction']:.0%}",
                r["xla_fusions_our_module"],
                r["xla_fusions_jax_module"],
            ]
            for r in rows
        ],
    )
    print("\nintermediates materialised before/after our fusion, and XLA's own fusions")
    print(table)
    path = write_results(args.out, "fusion_traffic", {"rows": rows, "table": table})
    print(f"wrote {path}")


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


if __name__ == "__main__":
    main()
