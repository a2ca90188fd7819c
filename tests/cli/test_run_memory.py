"""`run` stays within the memory it admitted (issue 28: "a bool parameter estimated at 250 MB is
drawn as float64 (2 GB, MemoryError) under a 1 GiB TILEFOUNDRY_MEMORY_LIMIT; `run`'s judge builds
float64 copies past the limit it admitted").

The footprint check admits a run by the bytes of its values in their own dtypes, so drawing the
inputs, judging the results and summarising them may add only a bounded scratch space on top: a
few blocks, and for the judge one copy of an oracle output in its own dtype (its median). Peaks
are measured with tracemalloc, which numpy reports its array buffers to.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tilefoundry.cli.judge import judge
from tilefoundry.cli.program import draw_integer, random_inputs
from tilefoundry.cli.run import _statistics
from tilefoundry.frontend import parse_source

ELEMENTS = 8 * 2**20
SCRATCH = 8 * 2**20
"""The bytes of scratch allowed on top of what the footprint admits: well under one float64
copy of the arrays tested here (64 MiB), well over a few blocks of them."""


def _peak(action) -> tuple[object, int]:
    tracemalloc.start()
    try:
        value = action()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("dtype", ["bool", "i8", "u8", "f16", "bf16", "f32"])
def test_drawing_an_input_needs_only_the_input(dtype):
    fn = parse_source(
        "from tilefoundry import Tensor, func\n\n"
        f'@func\ndef f(x: Tensor[({ELEMENTS},), "{dtype}"]):\n    return x\n',
        "draw.py",
    )["f"]
    (array,), peak = _peak(lambda: random_inputs(fn, {}, np.random.default_rng(0)))
    assert array.size == ELEMENTS
    assert peak <= array.nbytes + SCRATCH


def test_the_draw_is_seeded_and_fair():
    fn = parse_source(
        "from tilefoundry import Tensor, func\n\n"
        '@func\ndef f(x: Tensor[(100_000,), "bool"]):\n    return x\n',
        "draw.py",
    )["f"]
    first = random_inputs(fn, {}, np.random.default_rng(7))[0]
    assert first.dtype == np.bool_
    assert np.array_equal(first, random_inputs(fn, {}, np.random.default_rng(7))[0])
    assert 0.49 < first.mean() < 0.51


@pytest.mark.parametrize(
    ("lo", "hi"),
    [(1, 10**30), (2**64, 2**64 + 3), (-(2**70), -(2**70) + 3), (-(2**63), 2**63)],
)
def test_a_dimvar_past_int64_is_drawn_seeded_and_in_its_range(lo, hi):
    """Issue 28: `DimVar('N', 1, 10**30)` made run draw with numpy's int64 generator
    (ValueError). Every draw lies in [lo, hi), a seed gives one value, and a range of three
    values is drawn fairly (each within 5 sigma of a third of 3,000 draws)."""
    draws = [draw_integer(np.random.default_rng(seed), lo, hi) for seed in range(3000)]
    assert all(isinstance(d, int) and lo <= d < hi for d in draws)
    assert draws[:50] == [draw_integer(np.random.default_rng(s), lo, hi) for s in range(50)]
    if hi - lo == 3:
        counts = [draws.count(lo + k) for k in range(3)]
        assert all(abs(c - 1000) < 5 * (3000 * (1 / 3) * (2 / 3)) ** 0.5 for c in counts), counts
    else:
        assert len(set(draws)) == len(draws)  # a wide range repeats no value in 3,000 draws


def test_judging_needs_one_copy_of_an_output_in_its_own_dtype():
    want = np.random.default_rng(0).standard_normal(ELEMENTS, dtype=np.float32)
    got = want.copy()
    got[12345] += 1.0
    verdict, peak = _peak(lambda: judge([got], [want]))
    assert not verdict.ok and verdict.mismatches == 1
    assert verdict.worst[0].index == (12345,)
    assert peak <= want.nbytes + SCRATCH


def test_the_summary_statistics_need_only_blocks():
    values = np.random.default_rng(1).standard_normal(ELEMENTS, dtype=np.float32)
    stats, peak = _peak(lambda: _statistics(values))
    wide = values.astype(np.float64)
    assert stats == pytest.approx(
        (wide.mean(), wide.std(), wide.min(), wide.max()), rel=1e-9, abs=1e-9
    )
    assert peak <= SCRATCH


def test_a_parameter_used_as_an_index_is_drawn_inside_the_axis_it_indexes():
    """Gather and ScatterAdd refuse an index outside [0, extent) (hir tensor Gather); a random
    run draws such a parameter inside the smallest extent it indexes (a DimVar's bound one), the
    other integers as before (negative ones included)."""
    fn = parse_source(
        "from tilefoundry import DimVar, Tensor, func\nfrom tilefoundry.dsl import tf\n\n"
        'V = DimVar("V", 1, 64)\n\n'
        "@func\n"
        'def f(table: Tensor[(V, 4), "f32"], small: Tensor[(3, 4), "f32"],\n'
        '      ids: Tensor[(500,), "i32"], other: Tensor[(500,), "i32"]):\n'
        "    return tf.gather(table, ids, axis=0), tf.gather(small, ids, axis=0), other\n",
        "draw.py",
    )["f"]
    for seed in range(5):
        _, _, ids, other = random_inputs(fn, {"V": 5}, np.random.default_rng(seed))
        assert ids.min() >= 0 and ids.max() <= 2 and len(np.unique(ids)) == 3
        assert other.min() < 0
