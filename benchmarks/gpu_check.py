"""The GPU check (issue 27): everything the GPU path promises, in one run of under 8 minutes.

On a machine whose jax default backend is a GPU:
1. every example tile kernel (examples/tiled_matmul.py, online_softmax.py, flash_attention.py)
   runs compiled through Triton (`run_pallas(..., interpret=False)`, not interpreted) and is
   compared with a float64 numpy oracle;
2. each kernel is timed against `jax.jit` of the same math in jax.numpy (XLA's own fusion), and
   flash attention also against `jax.nn.dot_product_attention`: medians of interleaved samples on
   device-resident inputs, each call waiting for its result, reported as ratios;
3. the tensor-parallel Llama layer of examples/llama.py runs with `run_xla` on the GPUs (its tp
   mesh resized to 1, 2, 4 or 8, the most the GPUs present hold) and is compared with the
   reference evaluator's simulation of the same mesh.
The table goes to benchmarks/results/gpu_check.json (or `--out`).

`--dry-run` (any machine, CPU included): the same kernels, peers and Llama module lowered for
`cuda` (what a GPU machine compiles, up to the PTX compile), each checked for its Triton custom
call or its partitioned module (the Llama module on 8 host devices standing in for 8 GPUs); no
figure is measured and the table says so.
Run: `python benchmarks/gpu_check.py` on a GPU machine, `python benchmarks/gpu_check.py --dry-run`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
if "--dry-run" in sys.argv:  # before jax starts its backend: 8 host devices for the Llama module
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import jax
import jax.numpy as jnp
import numpy as np
from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    standard_arguments,
    write_results,
)

from tilefoundry.exits.pallas import Triton, lower_for_cuda, lower_pallas, run_pallas

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BUDGET_S = 8 * 60
LOWERED = "lowered for cuda (dry run: no GPU figures)"


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _softmax(x, xp):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention(q, k, v, xp):
    return _softmax((q @ k.T) / np.sqrt(q.shape[-1]), xp) @ v


def _kernels(rng):
    """(name, the example's @func, inputs, float64 oracle, jnp peers by name)."""
    a, b = _normal(rng, 16, 64), _normal(rng, 64, 16)
    x = _normal(rng, 8, 64)
    q, k, v = _normal(rng, 32, 16), _normal(rng, 64, 16), _normal(rng, 64, 16)
    wide = [np.asarray(t, np.float64) for t in (q, k, v)]

    def dpa(q, k, v):
        return jax.nn.dot_product_attention(q[None, :, None], k[None, :, None], v[None, :, None])

    return [
        ("tiled_matmul", (a, b), a.astype(np.float64) @ b, {"jax.jit": lambda a, b: a @ b}),
        (
            "online_softmax",
            (x,),
            _softmax(x.astype(np.float64), np),
            {"jax.jit": lambda x: _softmax(x, jnp)},
        ),
        (
            "flash_attention",
            (q, k, v),
            _attention(*wide, np),
            {
                "jax.jit": lambda q, k, v: _attention(q, k, v, jnp),
                "jax.nn.dot_product_attention": dpa,
            },
        ),
    ]


def _structs(arrays):
    return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]


def _lowered_text(fn, arrays) -> str:
    return jax.jit(fn).trace(*_structs(arrays)).lower(lowering_platforms=("cuda",)).as_text()


def check_kernel(name, arrays, oracle, peers, *, dry_run: bool, repeats: int) -> list[list]:
    fn = getattr(_example(name), name)
    if dry_run:
        text = lower_for_cuda(fn, *arrays)
        if f"@{Triton.custom_call}" not in text:
            raise AssertionError(f"{name}: no Triton custom call in the cuda lowering")
        rows = [[name, "tilefoundry (Triton)", LOWERED, "", ""]]
        for peer in peers:
            _lowered_text(peers[peer], arrays)
            rows.append([name, peer, LOWERED, "", ""])
        return rows
    got = run_pallas(fn, *arrays, interpret=False, gpu_backend="triton")
    error = float(np.max(np.abs(got - oracle)) / max(1.0, float(np.median(np.abs(oracle)))))
    if not np.allclose(got, oracle, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"{name}: the compiled kernel differs from the oracle ({error:.2e})")
    kernel = lower_pallas(fn, *arrays)
    ours = jax.jit(kernel.gpu_call(Triton()))
    placed = [jax.device_put(a) for a in (*arrays, *kernel.constant_arrays())]
    rows = []
    for peer_name, peer in peers.items():
        jitted = jax.jit(peer)
        t_ours, t_peer = interleaved_medians(
            lambda: ours(*placed)[0].block_until_ready(),
            lambda jitted=jitted: jitted(*placed[: len(arrays)]).block_until_ready(),
            repeats,
            min_sample_s=0.01,
        )
        rows.append(
            [name, peer_name, f"{t_ours * 1e6:.1f} us", f"{t_peer * 1e6:.1f} us",
             f"{t_ours / t_peer:.2f}x (error {error:.1e})"]
        )  # fmt: skip
    return rows


def _llama_tp(devices: int):
    """examples/llama.py's `llama_tp`, its tp mesh resized to `devices` (the heads divide)."""
    source = (EXAMPLES / "llama.py").read_text()
    declared = 'TP = make_mesh((8,), ("tp",))'
    if declared not in source:
        raise AssertionError(f"examples/llama.py no longer declares {declared}")
    resized = source.replace(declared, f'TP = make_mesh(({devices},), ("tp",))')
    namespace: dict = {"__name__": "gpu_check_llama"}
    exec(compile(resized, str(EXAMPLES / "llama.py"), "exec", dont_inherit=True), namespace)
    return namespace["llama_tp"]


def check_llama(*, dry_run: bool) -> list[list]:
    from tilefoundry.evaluator import evaluate
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.exits.runtimes.xla_spmd import spmd_function

    devices = max(d for d in (1, 2, 4, 8) if d <= len(jax.devices()))
    fn = _llama_tp(devices)
    rng = np.random.default_rng(27)
    arrays = [_normal(rng, *p.type.shape) * 0.1 for p in fn.params]
    label = f"llama_tp on {devices} {jax.default_backend()} device(s)"
    if dry_run:
        call = spmd_function(fn, devices, {}, platforms=("cuda",)).call
        text = call.trace(*_structs(arrays)).lower(lowering_platforms=("cuda",)).as_text()
        if f"mhlo.num_partitions = {devices}" not in text:
            raise AssertionError("llama_tp: the cuda lowering is not partitioned")
        return [["llama_tp", "run_xla (SPMD)", LOWERED, "", label]]
    start = time.perf_counter()
    got = run_xla(fn, *arrays, devices=devices)
    seconds = time.perf_counter() - start
    expected = evaluate(fn, *arrays)
    if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
        raise AssertionError("llama_tp: run_xla on the GPU differs from the reference evaluator")
    return [["llama_tp", "run_xla (SPMD)", f"{seconds:.2f} s first call", "", label]]


def main() -> int:
    parser = standard_arguments(__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="lower for cuda; measure nothing")
    args = parser.parse_args()
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not args.dry_run:
        print(f"no GPU here (jax's backend is {jax.default_backend()!r}); use --dry-run")
        return 2
    start = time.perf_counter()
    repeats = repeats_for(args, 50)
    rows = []
    for name, arrays, oracle, peers in _kernels(np.random.default_rng(0)):
        rows += check_kernel(name, arrays, oracle, peers, dry_run=args.dry_run, repeats=repeats)
    rows += check_llama(dry_run=args.dry_run)
    elapsed = time.perf_counter() - start
    headers = ["program", "peer", "tilefoundry", "peer time", "ratio / note"]
    print(markdown_table(headers, rows))
    print(f"{elapsed:.1f} s of a {BUDGET_S} s budget")
    device = "none (dry run)" if args.dry_run else str(jax.devices()[0].device_kind)
    payload = {"dry_run": args.dry_run, "device": device, "seconds": round(elapsed, 1)}
    path = write_results(args.out, "gpu_check", {**payload, "headers": headers, "rows": rows})
    print(f"wrote {path}")
    return 0 if elapsed < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
