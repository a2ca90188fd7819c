"""`tilefoundry emit FILE --pallas`: the Pallas kernel of a tile program, as text.

The grid and BlockSpec summary (what the launch is) comes first, then the jaxpr of the
`pallas_call`, whose kernel body shows the per-CTA ops, the `fori_loop` of each tile loop and
the windowed Ref reads. Shapes come from the signature (DimVars from --dim, else a seeded draw).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tilefoundry.cli.console import progress
from tilefoundry.cli.program import bind_dims, random_inputs
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir import Function


def emit_pallas(args: argparse.Namespace, fn: Function) -> int:
    from tilefoundry.exits.pallas import lower_pallas

    if args.portable:
        raise VerifyError("emit --pallas prints the kernel as text; drop --portable")
    rng = np.random.default_rng(0)
    arrays = random_inputs(fn, bind_dims(fn, dict(args.dim), rng), rng)
    with progress(f"building the Pallas kernel of {fn.name}"):
        kernel = lower_pallas(fn, *arrays, caller="emit --pallas")
        text = f"{kernel.summary()}\n{kernel.jaxpr()}\n"
    if not args.output:
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes, @{fn.name})")
    return 0
