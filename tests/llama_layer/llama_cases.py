"""The five shardings of examples/llama.py, their inputs and their float64 numpy answers.

Shared by the tests and by the 8-device worker process (which receives only a variant name and
numpy arrays, and loads the example itself).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from llama_layer import llama_reference as reference
from tilefoundry.frontend import parse_source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "llama.py"
VARIANTS = ("llama_tp", "llama_dp_tp", "llama_sp", "llama_stack", "llama_decode")
DECODE_POSITION = 5
"""The decode step writes position 5 of the 16-long cache and attends to positions 0..5."""


@cache
def example() -> dict[str, Any]:
    """The example's namespace, parsed with its real file name (so errors point into it)."""
    return parse_source(EXAMPLE.read_text(encoding="utf-8"), str(EXAMPLE))


def program(name: str):
    return example()[name]


def config() -> reference.Config:
    names = example()
    return reference.Config(
        batch=names["BATCH"],
        seq=names["SEQ"],
        hidden=names["HIDDEN"],
        heads=names["HEADS"],
        ffn=names["FFN"],
        eps=names["EPS"],
    )


def inputs(name: str) -> tuple[np.ndarray, ...]:
    """Activations ~ N(0, 1), norm weights near 1, projections scaled by 1/sqrt(fan-in) (the
    usual initialisation, so the softmax is neither flat nor one-hot)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    arrays = []
    for param in program(name).params:
        shape = tuple(int(d) for d in param.type.shape)
        if param.name == "pos":
            arrays.append(np.array([DECODE_POSITION], dtype=np.int32))
        elif "norm" in param.name:
            arrays.append((1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
        elif param.name.startswith("w"):
            scaled = rng.standard_normal(shape) / np.sqrt(shape[-2])
            arrays.append(scaled.astype(np.float32))
        else:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
    return tuple(arrays)


def expected(name: str, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """The numpy answer (a tuple: the decode step returns the output and both caches)."""
    if name == "llama_decode":
        x, pos, k_cache, v_cache, *weights = arrays
        weights = dict(zip(reference.WEIGHT_NAMES, weights, strict=True))
        return reference.decode(x, int(pos[0]), k_cache, v_cache, weights, config())
    x, *weights = arrays
    weights = dict(zip(reference.WEIGHT_NAMES, weights, strict=True))
    if name == "llama_stack":
        return (reference.stack(x, weights, config()),)
    return (reference.layer(x, weights, config()),)


def assert_matches(got: Any, want: tuple[np.ndarray, ...], what: str) -> None:
    """f32 results equal to the float64 answer within rel 1e-5 of each output's scale."""
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        assert g.dtype == np.float32 and g.shape == w.shape, f"{what}[{i}]: {g.dtype}{g.shape}"
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * scale, err_msg=f"{what}[{i}]")
