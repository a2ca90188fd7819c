# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Windowed reads on a device mesh, and what runs them inside the 8-device worker.

A DynamicSlice whose windowed axis is unsplit is "the kernel on the local block" (DESIGN §4.14):
the block plan holds the windowed axis whole on every device and cuts the others, so the SPMD
exit needs no rule of its own for it. A loop over one device's share of a split axis reads each
device's own block (BlockedDynamicSlice). Imported by name in the worker (see tests/conftest.py).
"""

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

DP = make_mesh((8,), ("dp",))


@func
def rows_window(x: Tensor[(16 @ DP.dp, 16), "f32"]):
    return tf.exp(tf.dynamic_slice(x, 6, axis=1, size=4))


@func
def rows_window_plain(x: Tensor[(16, 16), "f32"]):
    return tf.exp(x[:, 6:10])


@func
def replicated_window(x: Tensor[(16, 16), "f32"], y: Tensor[(16 @ DP.dp, 4), "f32"]):
    return tf.dynamic_slice(x, 3, axis=1, size=4) + y


EP = make_mesh((8,), ("ep",))
EXPERTS, TOKENS, WIDTH = 16, 4, 8


@func
def local_experts(
    x: Tensor[(EXPERTS @ EP.ep, TOKENS, WIDTH), "f32"],
    w: Tensor[(EXPERTS @ EP.ep, WIDTH, WIDTH), "f32"],
):
    """Each device walks its own 2 experts (issue 29: a per-device window of a split axis)."""
    out = tf.reshard(
        tf.zeros((EXPERTS, TOKENS, WIDTH), "f32"),
        layout=(EXPERTS @ EP.ep, TOKENS, WIDTH),
        storage="gmem",
    )
    for e in range(EXPERTS // 8):
        out[e] = tf.silu(x[e] @ w[e])
    return out


PROGRAMS = {
    "rows_window": rows_window,
    "replicated_window": replicated_window,
    "local_experts": local_experts,
}


def run(name: str, arrays: tuple, devices: int):
    from tilefoundry.exits.runtimes.xla import run_xla

    return run_xla(PROGRAMS[name], *arrays, devices=devices)
