"""The StableHLO interpreter's own cases for the structural ops, run on the reference evaluator
and on XLA: inputs and expected values copied from openxla/stablehlo at commit
3c9301c116f97fbaf696959a0ede32712aec587b, file named per table (`stablehlo/tests/interpret/`).

Cases of dtypes tilefoundry does not have (i4, complex) are left out, each table says which. Two
spellings differ from StableHLO's, by design: Pad's padding value is an attribute, and StableHLO's
general scatter (multi-dimensional index vectors selecting windows, a window out of bounds
skipped) is written as the index_add it amounts to (`scatter_as_index_add`).
"""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.hir.math import Clamp
from tilefoundry.ir.hir.tensor import Iota, Pad, Reshape, Reverse, ScatterAdd
from tilefoundry.ir.types import bf16, f16, f32, f64, i8, i16, i32, i64, make_tensor_type, u64

t = make_tensor_type

# ---- stablehlo/tests/interpret/iota.mlir (si4 and complex<f32|f64> cases left out) -------------

DIM_0 = [[0, 0, 0, 0], [1, 1, 1, 1], [2, 2, 2, 2]]
DIM_1 = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3]]
UI64_DIM = {
    0: [[[0, 0], [0, 0], [0, 0]], [[1, 1], [1, 1], [1, 1]]],
    1: [[[0, 0], [1, 1], [2, 2]], [[0, 0], [1, 1], [2, 2]]],
    2: [[[0, 1], [0, 1], [0, 1]], [[0, 1], [0, 1], [0, 1]]],
}
IOTA = [
    *(
        (f"iota_op_test_{name}_dim_{dim}", (3, 4), dim, dtype, DIM_1 if dim else DIM_0)
        for name, dtype in (("si8", i8), ("si16", i16), ("si32", i32), ("si64", i64),
                            ("bf16", bf16), ("f16", f16), ("f32", f32), ("f64", f64))
        for dim in (0, 1)
    ),
    *((f"iota_op_test_ui64_dim_{dim}", (2, 3, 2), dim, u64, UI64_DIM[dim]) for dim in (0, 1, 2)),
]  # fmt: skip


def _iota(shape, dim, dtype):
    return function_of({}, lambda: call(Iota(shape=shape, dtype=dtype, axis=dim))), ()


# ---- stablehlo/tests/interpret/pad.mlir, reverse.mlir, clamp.mlir ------------------------------

PAD_OPERAND = [[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 4, 0], [0, 5, 6, 0], [0, 0, 0, 0]]
PAD_EXPECTED = [
    [-1, -1, -1, -1, -1], [-1, 0, -1, 0, -1], [-1, 1, -1, 2, -1], [-1, 3, -1, 4, -1],
    [-1, 5, -1, 6, -1], [-1, 0, -1, 0, -1], [-1, -1, -1, -1, -1],
]  # fmt: skip


def _pad():
    op = Pad(low=(1, -1), high=(1, -1), interior=(0, 1), value=-1)
    return function_of({"x": t((5, 4), i64)}, lambda x: call(op, x)), (_i64(PAD_OPERAND),)


def _reverse():
    op = Reverse(axes=(1, 0))
    fn = function_of({"x": t((3, 2), i64)}, lambda x: call(op, x))
    return fn, (_i64([[1, 2], [3, 4], [5, 6]]),)


CLAMP = [  # (case, min, operand, max, expected)
    ("clamp_op_test_si64", [1, 5, -5], [2, 3, -1], [3, 7, -3], [2, 5, -3]),
    ("clamp_op_test_si64_min_scalar", [0, 0, -2], [2, 3, -1], 1, [1, 1, -1]),
    ("clamp_op_test_si64_max_scalar", 0, [2, 3, -1], [1, 1, 4], [1, 1, 0]),
    ("clamp_op_test_si64_min_max_both_scalar", 0, [2, 3, -1], 1, [1, 1, 0]),
]


def _clamp(lo, x, hi):
    arrays = tuple(_i64(v) for v in (x, lo, hi))
    params = {n: t(a.shape, i64) for n, a in zip(("x", "lo", "hi"), arrays, strict=True)}
    return function_of(params, lambda x, lo, hi: call(Clamp(), x, lo, hi)), arrays


# ---- stablehlo/tests/interpret/scatter.mlir (both cases use the add combiner) ------------------

SCATTER_INPUTS = [[[1, 2], [3, 4], [5, 6], [7, 8]], [[9, 10], [11, 12], [13, 14], [15, 16]],
                  [[17, 18], [19, 20], [21, 22], [23, 24]]]  # fmt: skip
SCATTER = {
    "scatter_op_test": dict(
        inputs=SCATTER_INPUTS,
        indices=[[[0, 2], [1, 0], [2, 1]], [[0, 1], [1, 0], [0, 9]]],
        updates_shape=(2, 3, 2, 2),
        batching=None,
        expected=[[[1, 2], [5, 6], [7, 8], [7, 8]], [[10, 11], [12, 13], [14, 15], [16, 17]],
                  [[18, 19], [20, 21], [21, 22], [23, 24]]],
    ),
    "scatter_op_with_batching_dim_test": dict(
        inputs=[SCATTER_INPUTS, [[[25, 26], [27, 28], [29, 30], [31, 32]],
                                 [[33, 34], [35, 36], [37, 38], [39, 40]],
                                 [[41, 42], [43, 44], [45, 46], [47, 48]]]],
        indices=[[[[0, 0], [1, 0], [2, 1]], [[0, 1], [1, 1], [0, 9]]],
                 [[[0, 0], [2, 1], [2, 2]], [[1, 2], [0, 1], [1, 0]]]],
        updates_shape=(2, 2, 3, 2, 2),
        batching=(0, 1),  # input_batching_dims = [0], scatter_indices_batching_dims = [1]
        expected=[[[[3, 4], [6, 7], [6, 7], [7, 8]], [[9, 10], [11, 12], [15, 16], [17, 18]],
                   [[17, 18], [19, 20], [22, 23], [24, 25]]],
                  [[[25, 26], [28, 29], [30, 31], [31, 32]], [[35, 36], [38, 39], [38, 39],
                   [39, 40]], [[41, 42], [44, 45], [46, 47], [47, 48]]]],
    ),
}  # fmt: skip
"""Both cases: `scatter_dims_to_operand_dims = [w + 1, w]` (an index vector (a, b) starts the
window at row b, column a of the (rows, columns, 2) operand), a 2x2 window per index vector
over (columns, last axis), `inserted_window_dims` the row axis; the second adds a batch axis."""


def scatter_as_index_add(case: dict):
    """The index_add a case amounts to: (rows, columns) flattened into one axis of the operand,
    each in-bounds window element one index (row * columns + column + w) with its update row;
    a window that does not fit is skipped, as StableHLO skips it. Per batch element the lists
    are padded to one length with zero updates at index 0 (adding zero changes nothing)."""
    inputs = np.asarray(case["inputs"], np.int64)
    batched = case["batching"] is not None
    table = inputs if batched else inputs[None]
    indices = np.asarray(case["indices"])
    indices = np.moveaxis(indices, 1, 0) if batched else indices[None]
    updates = np.ones(case["updates_shape"], np.int64)
    updates = np.moveaxis(updates, 1, 0) if batched else updates[None]
    _, rows, columns, _ = table.shape
    per_batch = []
    for b in range(table.shape[0]):
        entries = []
        for position in np.ndindex(*indices.shape[1:-1]):
            column, row = indices[(b, *position)]
            if row >= rows or column + 2 > columns:
                continue
            for w in range(2):
                entries.append((row * columns + column + w, updates[(b, *position, w)]))
        per_batch.append(entries)
    length = max(map(len, per_batch))
    flat_indices = np.zeros((len(per_batch), length), np.int64)
    flat_updates = np.zeros((len(per_batch), length, table.shape[-1]), np.int64)
    for b, entries in enumerate(per_batch):
        for k, (index, update) in enumerate(entries):
            flat_indices[b, k], flat_updates[b, k] = index, update
    if not batched:
        return inputs, flat_indices[0], flat_updates[0]
    return inputs, flat_indices, flat_updates


def _scatter(case):
    inputs, indices, updates = scatter_as_index_add(case)
    shape = inputs.shape
    batch = 1 if case["batching"] else 0
    flat = (*shape[:batch], shape[batch] * shape[batch + 1], shape[-1])
    op = ScatterAdd(axis=batch, batch_dims=batch)

    def build(x, i, u):
        scattered = call(op, call(Reshape(new_shape=flat), x), i, u)
        return call(Reshape(new_shape=shape), scattered)

    params = {"x": t(shape, i64), "i": t(indices.shape, i64), "u": t(updates.shape, i64)}
    return function_of(params, build), (inputs, indices, updates)


def _i64(values) -> np.ndarray:
    return np.asarray(values, np.int64)


CASES = [
    *(pytest.param(lambda c=c: _iota(*c[1:4]), c[4], c[3], id=c[0]) for c in IOTA),
    pytest.param(_pad, PAD_EXPECTED, i64, id="pad"),
    pytest.param(_reverse, [[6, 5], [4, 3], [2, 1]], i64, id="reverse"),
    *(pytest.param(lambda c=c: _clamp(*c[1:4]), c[4], i64, id=c[0]) for c in CLAMP),
    *(pytest.param(lambda c=c: _scatter(c), c["expected"], i64, id=n) for n, c in SCATTER.items()),
]


def _compare(got, expected, dtype) -> None:
    want = np.asarray(expected).astype(dtype.to_numpy())
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("build", "expected", "dtype"), CASES)
def test_the_reference_evaluator_computes_the_interpreters_values(build, expected, dtype):
    fn, arrays = build()
    kept = [a.copy() for a in arrays]
    _compare(evaluate(fn, *arrays), expected, dtype)
    for before, after in zip(kept, arrays, strict=True):  # "Check that `inputs` is not modified"
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize(("build", "expected", "dtype"), CASES)
def test_xla_computes_the_interpreters_values(build, expected, dtype):
    pytest.importorskip("jax", reason="the XLA run needs jax[lib]")
    from tilefoundry.exits.runtimes.xla import run_xla

    fn, arrays = build()
    _compare(run_xla(fn, *arrays), expected, dtype)
