"""Remat on XLA: the temporary bytes of the compiled gradient of L `tanh(tanh(x @ w) @ w)` layers
on a (256, 8) f32 activation, unmarked and through `checkpoint`, next to jax.grad of the same
layers with and without `jax.checkpoint` compiled in the same run (the peer: both lower the
recomputation's inputs through `stablehlo.optimization_barrier`), for the layers written out
("stack") and as a loop over them ("loop", jax: `lax.fori_loop`). Also the recomputation visible
in the compiled HLO (tanh and dot ops) and our own estimate (`footprint.peak_bytes_per_device`).

    python benchmarks/remat_memory.py [L ...]
"""

from __future__ import annotations

import re
import sys

import numpy as np

BATCH, WIDTH = 256, 8


def tilefoundry_gradient(layers: int, marked: bool, looped: bool):
    from tilefoundry import grad
    from tilefoundry.frontend import parse_source

    name = "checkpoint(layer)" if marked else "layer"
    if looped:
        body = f"for i in range({layers}):\n        x = {name}(x, ws[i])\n    out = x"
    else:
        out = "x"
        for index in range(layers):
            out = f"{name}({out}, ws[{index}])"
        body = f"out = {out}"
    source = f"""
from tilefoundry import Tensor, checkpoint, func
from tilefoundry.dsl import tf

@func
def layer(x: Tensor[({BATCH}, {WIDTH}), "f32"], w: Tensor[({WIDTH}, {WIDTH}), "f32"]):
    return tf.tanh(tf.tanh(x @ w) @ w)

@func
def entry(x: Tensor[({BATCH}, {WIDTH}), "f32"], ws: Tensor[({layers}, {WIDTH}, {WIDTH}), "f32"]):
    {body}
    return tf.reduce(out, axes=(0, 1), keepdim=False, kind="sum")
"""
    return grad(parse_source(source, "remat_memory.py")["entry"], argnums=(0, 1))


def jax_gradient(layers: int, marked: bool, looped: bool):
    import jax
    import jax.numpy as jnp

    def layer(x, w):
        return jnp.tanh(jnp.tanh(x @ w) @ w)

    step = jax.checkpoint(layer) if marked else layer

    def loss(x, ws):
        if looped:
            x = jax.lax.fori_loop(0, layers, lambda i, x: step(x, ws[i]), x)
        else:
            for index in range(layers):
                x = step(x, ws[index])
        return x.sum()

    return jax.jit(jax.grad(loss, argnums=(0, 1)))


def measured(compiled) -> tuple[int, int, int]:
    hlo = compiled.as_text()
    tanh, dot = len(re.findall(r" tanh\(", hlo)), len(re.findall(r" dot\(", hlo))
    return compiled.memory_analysis().temp_size_in_bytes, tanh, dot


def main(layer_counts: list[int]) -> None:
    import tilefoundry
    from tilefoundry.ir.hir.footprint import peak_bytes_per_device

    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
    print("form   L  marked  temp(ours)  tanh dot  estimate  temp(jax)  tanh dot")
    for looped in (False, True):
        for layers in layer_counts:
            ws = (rng.standard_normal((layers, WIDTH, WIDTH)) / 3).astype(np.float32)
            for marked in (False, True):
                fn = tilefoundry_gradient(layers, marked, looped)
                ours = measured(tilefoundry.jit(fn).compiled(x, ws))
                peer = measured(jax_gradient(layers, marked, looped).lower(x, ws).compile())
                print(
                    f"{'loop' if looped else 'stack':5} {layers:3}  {marked!s:6} {ours[0]:10} "
                    f"{ours[1]:5} {ours[2]:3} {peak_bytes_per_device(fn):9} {peer[0]:10} "
                    f"{peer[1]:5} {peer[2]:3}"
                )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [4, 8, 16])
