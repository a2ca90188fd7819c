"""Every elementwise kind passes the StableHLO reference interpreter's own cases (issue 29 item 6,
issue 28 item 6), run through the `tf` spelling of the file's op on the reference evaluator and
on XLA. The tables, copied from the files they cite, are in `elementwise_interpreter_cases`.

Beyond the file's own checker, the sign of a zero is compared wherever the file writes one (the
interpreter's checker takes -0.0 == +0.0; the spec's maximum/minimum and sign do not).

One documented exit difference applies (docs/numerics.md): XLA's CPU runtime flushes subnormal
f32 and f64 values to zero, and bf16's, which it computes in f32. On XLA such a case expects the
file's values with every subnormal a zero of its sign; the reference evaluator keeps them.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from exits.elementwise_interpreter_cases import ALMOST, EQ, TABLES
from support.functions import call, function_of
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types import DType, bf16, f32, f64, make_tensor_type
from tilefoundry.rules import surface_entry

pytest.importorskip("jax", reason="the XLA side of the interpreter cases needs jax[lib]")

from tilefoundry.exits.runtimes.xla import run_xla

ALMOST_TOLERANCE = 1e-4
"""check.expect_almost_eq_const's default: an absolute difference (stablehlo/tests/CheckOps.td)."""
XLA_FLUSHES_SUBNORMALS = (bf16, f32, f64)
"""docs/numerics.md: the dtypes whose subnormals XLA's CPU runtime reads and writes as zeros."""


def _array(dtype: DType, written, shape: tuple) -> np.ndarray:
    """The file's values as an array: a "0x..." string is a bit pattern, a bare value a splat."""
    np_dtype = np.dtype(dtype.to_numpy())
    items = written if isinstance(written, list) else [written]
    array = np.empty(len(items), np_dtype)
    for index, value in enumerate(items):
        if isinstance(value, str):
            array[index] = np.array(int(value, 16), f"u{np_dtype.itemsize}").view(np_dtype)
        else:
            array[index] = np.array(value).astype(np_dtype)
    if len(items) == 1:
        return np.broadcast_to(array.reshape(()), shape).copy()
    assert len(items) == math.prod(shape)
    return array.reshape(shape)


def _flushed(want: np.ndarray) -> np.ndarray:
    """Every subnormal replaced by a zero of its sign (the documented XLA CPU behaviour)."""
    smallest_normal = float(ml_dtypes.finfo(want.dtype).smallest_normal)
    wide = want.astype(np.float64)
    subnormal = (wide != 0) & (np.abs(wide) < smallest_normal)
    return np.where(subnormal, np.copysign(0.0, wide), wide).astype(want.dtype)


def _assert_agrees(got, want: np.ndarray, check: str, exact: bool) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(g) & np.isnan(w)
    if exact or check == EQ:
        close = g == w
    else:
        assert check == ALMOST, check
        with np.errstate(invalid="ignore"):
            close = (g == w) | (np.abs(g - w) <= ALMOST_TOLERANCE)
    zero_signs = (w != 0) | (np.signbit(g) == np.signbit(w))
    agrees = both_nan | (close & zero_signs)
    assert agrees.all(), f"got {got.tolist()}, expected {want.tolist()}"


def _cases():
    for table in TABLES:
        for name, dtype, shape, operands, expected, check in table.rows:
            for spelling in table.spelled(dtype):
                case = (table, dtype, shape, operands, expected, check, spelling)
                yield pytest.param(*case, id=f"{table.source}:{name}:{spelling}")


@pytest.mark.parametrize("backend", ["reference", "xla"])
@pytest.mark.parametrize(
    ("table", "dtype", "shape", "operands", "expected", "check", "spelling"), list(_cases())
)
def test_interpreter_case(backend, table, dtype, shape, operands, expected, check, spelling):
    entry = surface_entry(spelling)
    op = entry.op_class(**entry.fixed)
    arrays = [_array(dtype, values, shape) for values in operands]
    params = {f"a{i}": make_tensor_type(shape, dtype) for i in range(len(arrays))}
    fn = function_of(params, lambda *args: call(op, *args))
    result_dtype = table.result or dtype
    want = _array(result_dtype, expected, shape)
    if backend == "reference":
        got = evaluate(fn, *arrays)
    else:
        got = run_xla(fn, *arrays)
        if result_dtype in XLA_FLUSHES_SUBNORMALS:
            want = _flushed(want)
    _assert_agrees(got, want, check, table.exact)
