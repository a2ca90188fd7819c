"""What runs inside the 8-device worker (`devices8`, tests/conftest.py) for the Llama
gradients: ours on 8 XLA devices (as written and after `compile`), JAX's
`jax.jit(jax.grad(...))` with the same NamedShardings, and the collectives of both compiled
programs. Only names, numpy arrays and plain records cross the process boundary."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def jax_collectives(hlo_text: str) -> list[tuple[str, int, int]]:
    """(kind, result bytes, operand bytes) per device of each collective in a compiled,
    per-device HLO, read the way benchmarks/communication.py reads the forward's."""
    sys.path.insert(0, str(BENCHMARKS))
    from communication import hlo_collectives

    return [(c["kind"], c["out_bytes"], c["bytes"]) for c in hlo_collectives(hlo_text)]


def loop_collectives(hlo_text: str) -> list[str]:
    """The kind of each collective of a compiled HLO module that sits in the body of a while
    loop (a computation named as some `while`'s `body=`)."""
    sys.path.insert(0, str(BENCHMARKS))
    from communication import hlo_collectives

    bodies = set(re.findall(r"\bwhile\(.*?body=%?([\w.-]+)", hlo_text))
    computations = re.split(r"\n(?=(?:ENTRY )?%?[\w.-]+ \()", hlo_text)
    return [
        c["kind"]
        for text in computations
        if re.match(r"(?:ENTRY )?%?([\w.-]+)", text.lstrip()).group(1) in bodies
        for c in hlo_collectives(text)
    ]


def ours(name: str, arrays: tuple, compiled: bool) -> tuple[str, Any]:
    """("ok", (gradients, collectives, compiled collectives, kinds in loops)) or
    ("error", "<Class>: <message>"): the collectives the SPMD exit writes, (kind, mesh axes,
    result bytes, operand bytes, trips) per device, once per instruction in the module (one in a
    loop body runs `trips` times); those XLA's compiled executable holds (`jax_collectives`; it
    partitions nothing itself, so the two agree); and the kinds of the compiled collectives that
    sit in a while loop."""
    from llama_layer.llama_grad_cases import gradient
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.exits.runtimes.xla_spmd import _compile
    from tilefoundry.exits.stablehlo.spmd import collective_report, emit_spmd
    from tilefoundry.passes import compile as compile_pipeline

    fn = gradient(name)
    try:
        if compiled:
            fn = compile_pipeline(fn)[0]
        result = run_xla(fn, *arrays, devices=8)
        report = [
            (
                e.kind.replace("_", "-"),
                e.mesh_axes,
                e.result_bytes_per_device,
                e.bytes_per_device,
                e.count // e.emitted,
            )
            for e in collective_report(fn)
            for _ in range(e.emitted)
        ]
        executable, _ = _compile(emit_spmd(fn), 8)
        hlo = "\n".join(module.to_string() for module in executable.hlo_modules())
        return "ok", (tuple(result), report, jax_collectives(hlo), loop_collectives(hlo))
    except Exception as err:  # reported to the test, which decides what it means
        return "error", f"{type(err).__name__}: {getattr(err, 'message', err)}"


def jax_gradients(name: str, arrays: tuple) -> tuple[tuple, list[tuple[str, int, int]]]:
    """JAX's gradients of the same loss, jitted with every parameter's sharding as input and
    output sharding, and the collectives of its compiled program."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from llama_layer.llama_grad_cases import PARAMETERS, SPECS, jax_loss

    devices = np.array(jax.devices())
    mesh = (
        Mesh(devices.reshape(2, 4), ("dp", "tp"))
        if name == "llama_dp_tp"
        else Mesh(devices, ("tp",))
    )
    shardings = tuple(NamedSharding(mesh, PartitionSpec(*spec)) for spec in SPECS[name])

    def constrain(value, spec):
        return jax.lax.with_sharding_constraint(value, NamedSharding(mesh, PartitionSpec(*spec)))

    grads = jax.grad(jax_loss(name, constrain), argnums=tuple(range(len(PARAMETERS))))
    jitted = jax.jit(grads, in_shardings=shardings, out_shardings=shardings)
    placed = [jax.device_put(a, s) for a, s in zip(arrays, shardings, strict=True)]
    compiled = jitted.lower(*placed).compile()
    result = tuple(np.asarray(g) for g in compiled(*placed))
    return result, jax_collectives(compiled.as_text())


def accumulation_collectives(name: str) -> list[tuple[str, tuple, int]]:
    """(kind, mesh axes, bytes) of a two-micro-batch step that sums pending gradients
    (`reduce_gradients=False`) and completes them once."""
    from llama_layer.llama_grad_cases import accumulation_step
    from tilefoundry.exits.stablehlo.spmd import collective_report

    return [
        (e.kind, e.mesh_axes, e.result_bytes_per_device)
        for e in collective_report(accumulation_step(name))
        for _ in range(e.count)
    ]
