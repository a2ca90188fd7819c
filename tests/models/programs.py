"""The model programs by name, for the tests and the 8-device worker, and their comparison.

A name is `module:function` for a program of this directory (`models.gqa:gqa_attention`) or
`examples/FILE.py:function` for a shipped example, parsed under its real file name so that its
errors point into it. Only names and numpy arrays cross into the worker process.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tilefoundry.frontend import parse_source

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


@cache
def example(path: str) -> dict[str, Any]:
    file = REPO / path
    return parse_source(file.read_text(encoding="utf-8"), str(file))


def program(name: str):
    where, function = name.split(":")
    if where.endswith(".py"):
        return example(where)[function]
    return getattr(importlib.import_module(where), function)


def run_on_devices(name: str, arrays: tuple, compiled: bool) -> tuple[str, Any]:
    """("ok", result) or ("error", "<ErrorClass>: <message>"): an exception object may not
    survive pickling, so the test gets the text."""
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.passes import compile as compile_pipeline

    try:
        fn = program(name)
        if compiled:
            fn = compile_pipeline(fn)[0]
        return "ok", run_xla(fn, *arrays, devices=8)
    except Exception as err:  # reported to the test, which fails with the message
        return "error", f"{type(err).__name__}: {getattr(err, 'message', err)}"


def run_vjp_on_devices(
    name: str, argnums: tuple[int, ...], arrays: tuple, compiled: bool
) -> tuple[str, Any]:
    """`run_on_devices` of `vjp(program(name), argnums)`: arrays end with the output's
    cotangent; the result is (outputs, cotangents of the argnums)."""
    from tilefoundry import vjp
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.passes import compile as compile_pipeline

    try:
        fn = vjp(program(name), argnums=argnums)
        if compiled:
            fn = compile_pipeline(fn)[0]
        return "ok", run_xla(fn, *arrays, devices=8)
    except Exception as err:  # reported to the test, which fails with the message
        return "error", f"{type(err).__name__}: {getattr(err, 'message', err)}"


def on_devices(pool, name: str, arrays: tuple, compiled: bool = False) -> Any:
    status, value = pool.submit(run_on_devices, name, arrays, compiled).result(timeout=TIMEOUT_S)
    assert status == "ok", value
    return value


def assert_close(got: Any, want: Any, what: str, rtol: float = 1e-5) -> None:
    """Results equal to the float64 answer within `rtol` of each output's scale (f32: 1e-5)."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        assert g.shape == w.shape, f"{what}[{i}]: shape {g.shape}, want {w.shape}"
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(
            g.astype(np.float64), w, rtol=rtol, atol=rtol * scale, err_msg=f"{what}[{i}]"
        )


def assert_gradients_match_central_differences(
    gradients: tuple, loss64: Any, arrays: tuple, argnums: tuple[int, ...], what: str
) -> None:
    """Each gradient (f32, from the program) against the float64 reference `loss64`: along a
    random direction d of its argument, <gradient, d> equals the central difference of `loss64`
    within rel 1e-4 (f32 gradients against an O(eps^2) float64 difference), plus 1e-6 absolute
    for an O(1) loss (a gradient that is exactly zero in exact arithmetic, such as a key bias
    under softmax, is f32 rounding in the program)."""
    rng = np.random.default_rng(1)
    eps = 1e-4
    for gradient, index in zip(gradients, argnums, strict=True):
        direction = rng.standard_normal(arrays[index].shape)

        def along(step: float, index=index, direction=direction) -> float:
            moved = list(arrays)
            moved[index] = arrays[index].astype(np.float64) + step * direction
            return float(loss64(*moved))

        expected = (along(eps) - along(-eps)) / (2 * eps)
        got = float(np.vdot(np.asarray(gradient, dtype=np.float64), direction))
        assert abs(got - expected) <= 1e-4 * abs(expected) + 1e-6, (
            f"{what}: argument {index}: <gradient, d> = {got}, central difference {expected}"
        )
