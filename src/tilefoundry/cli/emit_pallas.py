"""`tilefoundry emit FILE --pallas`: the Pallas kernel of a tile program, as text.

The grid and BlockSpec summary (what the launch is) comes first, then the jaxpr of the
`pallas_call`, whose kernel body shows the per-CTA ops, the `fori_loop` of each tile loop and
the windowed Ref reads. Shapes come from the signature (DimVars from --dim, else a seeded draw).
"""

from __future__ import annotations

import argparse

import numpy as np

from tilefoundry.cli.console import progress
from tilefoundry.cli.program import bind_dims, random_inputs
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir import Function


def pallas_text(args: argparse.Namespace, fn: Function, dims: dict) -> str:
    """The kernel's launch summary and jaxpr; `emit` writes it where the user asked."""
    from tilefoundry.exits.pallas import lower_pallas

    if args.portable:
        raise VerifyError("emit --pallas prints the kernel as text; drop --portable")
    rng = np.random.default_rng(0)
    arrays = random_inputs(fn, bind_dims(fn, dims, rng), rng)
    with progress(f"building the Pallas kernel of {fn.name}"):
        kernel = lower_pallas(fn, *arrays, caller="emit --pallas")
        return f"{kernel.summary()}\n{kernel.jaxpr()}\n"
