"""Reverse mode (issue 25 "Done when"): source -> gradient StableHLO compile time, and the
backward step on 8 CPU devices, each against JAX in the same run.

Compile: for the decoder of L layers (`_programs.decoder`, compile-scaling dims), our path is the
one a user pays for: the DSL source through `parse_source` (Python compile, parse, typeinfer),
`grad` of loss = sum(decoder(x, weights) * R) with respect to x and every weight, `compile`
(legalize, verify, fuse, verify) and `emit_stablehlo`. JAX's is
`jax.jit(jax.grad(loss, argnums=all)).lower(*specs).as_text()` of the same array code, traced
afresh each time (a new closure: JAX caches traces per function object). Each L is checked first:
our gradient run on XLA and JAX's jitted gradient agree.

Step: the gradient of mean(layer(x, weights) * R) of examples/llama.py's tensor-parallel Llama
layer (`llama_tp`) w.r.t. x and every weight, on 8 CPU devices (a subprocess started with
`XLA_FLAGS=--xla_force_host_platform_device_count=8`): `run_xla(grad, *arrays, devices=8)` of our
fused SPMD module vs `jax.jit(jax.grad(...))` with every parameter's NamedSharding as in and out
sharding (and `with_sharding_constraint` where the DSL reshards), numpy in and numpy out, and the
resident pair (both jitted functions on arguments already placed), as benchmarks/execute_xla.py
times forward programs.
Run: `python benchmarks/backward.py` (`--layers 8 32` picks the depths).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax
import jax.numpy as jnp
import numpy as np
from _programs import SMALL, allclose, decoder, parse_program
from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    run_device_side,
    standard_arguments,
    write_results,
)

from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.ir.core import Call, Constant, Var
from tilefoundry.ir.hir import Function
from tilefoundry.passes import compile as compile_fn

LAYERS = (8, 32)
QUICK_LAYERS = (1,)
DEVICES = 8


def projection(shape, dtype=np.float32) -> np.ndarray:
    """The fixed random R of the loss."""
    return np.random.default_rng(25).standard_normal(shape).astype(dtype)


def loss_of(fn: Function, r: np.ndarray, reduce: str = "sum") -> Function:
    """reduce(fn(params...) * R) over fn's own parameters (`reduce` is sum or mean)."""
    params = tuple(Var(p.name, p.type) for p in fn.params)
    out = tf.mul(Call(fn, params), Constant(r))
    body = tf.reduce(out, axes=tuple(range(out.type.rank)), keepdim=False, kind=reduce)
    return Function(f"loss_{fn.name}", params, body, TypeInferContext().infer(body))


def ours_gradient(program, r: np.ndarray) -> Function:
    loss = loss_of(parse_program(program), r)
    return grad(loss, argnums=tuple(range(len(loss.params))))


def ours_to_text(program, r: np.ndarray) -> str:
    fused, _ = compile_fn(ours_gradient(program, r))
    return emit_stablehlo(fused)


def jax_gradient(program, r: np.ndarray):
    def loss(*arrays):  # a fresh function object each call: nothing served from JAX's cache
        return jnp.sum(program.array_fn(jnp, *arrays) * r)

    return jax.grad(loss, argnums=tuple(range(len(program.params))))


def jax_to_text(program, r: np.ndarray, specs) -> str:
    return jax.jit(jax_gradient(program, r)).lower(*specs).as_text()


def check_same_gradients(program, r: np.ndarray) -> float:
    arrays = program.arguments()
    fused, _ = compile_fn(ours_gradient(program, r))
    ours = run_xla(fused, *arrays)
    peer = jax.jit(jax_gradient(program, r))(*arrays)
    worst = 0.0
    for index, (g, w) in enumerate(zip(ours, peer, strict=True)):
        same, error = allclose(g, w)
        if not same:
            raise SystemExit(f"{program.name}: gradient {index} differs ({error:.2e})")
        worst = max(worst, error)
    return worst


def stage_times(program, r: np.ndarray, repeats: int) -> dict[str, float]:
    """Medians of each of our stages alone, to show where the time goes."""
    samples: dict[str, list[float]] = {"parse": [], "grad": [], "compile": [], "emit": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn = parse_program(program)
        t1 = time.perf_counter()
        loss = loss_of(fn, r)
        gradient = grad(loss, argnums=tuple(range(len(loss.params))))
        t2 = time.perf_counter()
        fused, _ = compile_fn(gradient)
        t3 = time.perf_counter()
        emit_stablehlo(fused)
        t4 = time.perf_counter()
        for stage, seconds in zip(samples, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            samples[stage].append(seconds)
    return {stage: statistics.median(values) for stage, values in samples.items()}


def compile_rows(args, repeats: int) -> list[dict]:
    rows = []
    for layers in args.layers or (QUICK_LAYERS if args.quick else LAYERS):
        program = decoder(layers, SMALL)
        r = projection(program.params[0][1])
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in program.arguments()]
        error = check_same_gradients(program, r)
        ours, peer = interleaved_medians(
            lambda p=program, r=r: ours_to_text(p, r),
            lambda p=program, r=r, s=specs: jax_to_text(p, r, s),
            repeats,
        )
        rows.append(
            {
                "layers": layers,
                "ours_s": ours,
                "jax_s": peer,
                "ratio": ours / peer,
                "ours_stages_s": stage_times(program, r, repeats),
                "max_relative_error": error,
            }
        )
        print(f"L={layers}: {ours * 1e3:.0f} ms vs {peer * 1e3:.0f} ms", flush=True)
    return rows


def step_rows(args, repeats: int) -> list[dict]:
    """Runs in the subprocess with 8 host devices."""
    from communication import EXAMPLES, parse_example
    from execute_xla import timed_row
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from tilefoundry.exits.runtimes.xla_spmd import spmd_function

    (example,) = [e for e in EXAMPLES if e.name == "llama_tp_layer"]
    mesh = Mesh(np.array(jax.devices("cpu")[:DEVICES]), ("tp",))
    arrays = example.arguments()
    r = projection(example.shapes[0])
    loss = loss_of(parse_example(example), r, reduce="mean")
    fused, _ = compile_fn(grad(loss, argnums=tuple(range(len(loss.params)))))
    shardings = tuple(NamedSharding(mesh, PartitionSpec(*spec)) for spec in example.in_specs)

    def constrain(value, *spec):
        return jax.lax.with_sharding_constraint(value, NamedSharding(mesh, PartitionSpec(*spec)))

    def jax_loss(*a):
        return jnp.mean(example.array_fn(jnp, *a, constrain=constrain) * r)

    argnums = tuple(range(len(arrays)))
    jitted = jax.jit(
        jax.grad(jax_loss, argnums=argnums), in_shardings=shardings, out_shardings=shardings
    )

    pairs = zip(run_xla(fused, *arrays, devices=DEVICES), jitted(*arrays), strict=True)
    for index, (g, w) in enumerate(pairs):
        same, error = allclose(g, np.asarray(w))
        if not same:
            raise SystemExit(f"{example.name}: gradient {index} differs ({error:.2e})")
    call = spmd_function(fused, DEVICES, {}).call
    placed = [jax.device_put(a, s) for a, s in zip(arrays, shardings, strict=True)]

    def flat(gradients) -> np.ndarray:
        """The 10 gradients as one array, for timed_row's check (the same copy on both sides)."""
        return np.concatenate([np.ravel(np.asarray(g)) for g in gradients])

    def resident_peer():  # every gradient waited for; the first one checked
        first, *_ = (g.block_until_ready() for g in jitted(*placed))
        return first

    row = timed_row(
        f"grad {example.name}",
        [list(shape) for shape in example.shapes],
        lambda: flat(run_xla(fused, *arrays, devices=DEVICES)),
        lambda: flat(jitted(*arrays)),
        lambda: [o.block_until_ready() for o in call(*placed)],
        resident_peer,
        args,
        repeats,
    )
    return [row]


def main() -> None:
    parser = standard_arguments(__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", help=f"depths (default {LAYERS})")
    parser.add_argument("--device-side", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    repeats = repeats_for(args, 5)
    if args.device_side is not None:
        args.device_side.write_text(json.dumps(step_rows(args, repeats)))
        return
    rows = compile_rows(args, repeats)
    compile_table = markdown_table(
        ["L", "parse+infer ms", "grad ms", "compile ms", "emit ms", "ours ms", "jax ms", "ratio"],
        [
            [r["layers"], *(f"{r['ours_stages_s'][s] * 1e3:.1f}" for s in r["ours_stages_s"]),
             f"{r['ours_s'] * 1e3:.1f}", f"{r['jax_s'] * 1e3:.1f}", f"{r['ratio']:.2f}x"]
            for r in rows
        ],
    )  # fmt: skip
    steps = run_device_side(__file__, args, repeats, DEVICES)
    step_table = markdown_table(
        ["program", "run_xla µs", "jax.jit µs", "ratio", "ours resident µs", "jax resident µs",
         "resident ratio"],
        [
            [s["program"], f"{s['ours_s'] * 1e6:.0f}", f"{s['jax_s'] * 1e6:.0f}",
             f"{s['ratio']:.2f}x", f"{s['ours_device_resident_s'] * 1e6:.0f}",
             f"{s['jax_device_resident_s'] * 1e6:.0f}", f"{s['device_resident_ratio']:.2f}x"]
            for s in steps
        ],
    )  # fmt: skip
    print(f"\nsource -> gradient StableHLO, decoder {SMALL}, median of {repeats}")
    print(compile_table)
    print(f"\nbackward step, {DEVICES} CPU devices, vs jax.jit(jax.grad(...)), median of {repeats}")
    print(step_table)
    path = write_results(
        args.out,
        "backward",
        {"dims": SMALL.__dict__, "repeats": repeats, "rows": rows, "steps_8_devices": steps,
         "compile_table": compile_table, "step_table": step_table},
    )  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
