# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Windowed reads on a device mesh, and what runs them inside the 8-device worker.

A DynamicSlice whose windowed axis is unsplit is "the kernel on the local block" (DESIGN §4.14):
the block plan holds the windowed axis whole on every device and cuts the others, so the SPMD
exit needs no rule of its own for it. Imported by name in the worker (see tests/conftest.py).
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


PROGRAMS = {"rows_window": rows_window, "replicated_window": replicated_window}


def run(name: str, arrays: tuple, devices: int):
    from tilefoundry.exits.runtimes.xla import run_xla

    return run_xla(PROGRAMS[name], *arrays, devices=devices)
