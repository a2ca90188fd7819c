"""The one proof every StableHLO test runs: emit, let jaxlib parse + verify the text and serialise
a portable artifact at the pinned target, run it on XLA, and compare with the reference evaluator.

Tolerances: integers and bools exactly; floats to within what one differing rounding allows.
Both sides compute narrow floats in f32 and round once, so they may differ by one ulp of the
result dtype where f32 results straddle a rounding boundary (XLA's exp/tanh and reduction order
are not numpy's); f32/f64 get a few ulps of slack for those differences.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tilefoundry.evaluator import evaluate
from tilefoundry.exits.runtimes.xla import compiled_text, run_xla
from tilefoundry.exits.stablehlo.jaxlib_tools import parse_and_verify, serialize_portable

_FLOAT_RTOL = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12}


def checked_text(fn, *arrays) -> str:
    """The text run_xla compiles for `arrays`, accepted by jaxlib and serialisable at the pin."""
    text = compiled_text(fn, *arrays)
    parse_and_verify(text)
    assert serialize_portable(text).startswith(b"ML\xefR")  # a portable (VHLO bytecode) artifact
    return text


def run_both(fn, *arrays):
    """(text, XLA result, reference result) for `fn` on `arrays`."""
    return checked_text(fn, *arrays), run_xla(fn, *arrays), evaluate(fn, *arrays)


def assert_matches(got, want, rtol: float | None = None, path: str = "result") -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_matches(g, w, rtol, f"{path}[{i}]")
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{path}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{path}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=path)
        return
    if rtol is None:
        mantissa = ml_dtypes.finfo(want.dtype).nmant if want.dtype.itemsize < 4 else None
        rtol = _FLOAT_RTOL[want.dtype] if mantissa is None else 2.0**-mantissa
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    finite = np.abs(wide_want[np.isfinite(wide_want)])
    atol = rtol * max(1.0, float(np.max(finite, initial=0.0))) * 1e-3
    np.testing.assert_allclose(
        wide_got, wide_want, rtol=rtol, atol=atol, equal_nan=True, err_msg=path
    )


def check(fn, *arrays, rtol: float | None = None) -> str:
    """Run the whole proof and return the emitted text."""
    text, got, want = run_both(fn, *arrays)
    assert_matches(got, want, rtol)
    return text
