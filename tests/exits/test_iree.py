# ruff: noqa: F821
# Dtype names in Tensor[...] are strings that ruff reads as forward references.
"""IREE as a second StableHLO consumer: every unsharded frontend program runs on IREE's llvm-cpu
backend and matches the reference evaluator; f64/i64 survive (IREE would demote them by default);
the portable artifact is accepted too. IREE is an optional extra, so all of this skips without it.
"""

import sys

import numpy as np
import pytest

pytest.importorskip("iree.compiler", reason="IREE is an optional extra: tilefoundry[iree]")
pytest.importorskip("iree.runtime", reason="IREE is an optional extra: tilefoundry[iree]")

from exits.test_stablehlo_programs import UNSHARDED, arguments
from frontend import programs
from support.stablehlo_check import assert_matches
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.runtimes import iree
from tilefoundry.exits.runtimes.iree import run_iree
from tilefoundry.frontend import Tensor, func


@func
def wide_types(x: Tensor[(4,), "f64"], n: Tensor[(4,), "i64"]):
    return x * 3.0 + 1e-12, n * 3 + 1


@pytest.mark.parametrize("name", UNSHARDED)
def test_program_runs_on_iree_and_matches_the_reference(name):
    fn = getattr(programs, name)
    args = arguments(fn)
    assert_matches(run_iree(fn, *args), evaluate(fn, *args))


@pytest.mark.parametrize("extent", [3, 100])
def test_dimvar_programs_bind_from_the_arguments(extent):
    for fn in (programs.symbolic_shapes, programs.Dispatch.entry):
        args = arguments(fn, extent)
        assert_matches(run_iree(fn, *args), evaluate(fn, *args))


def test_f64_and_i64_are_not_demoted():
    # 1e-12 vanishes at f32 precision and 3 * 2**40 overflows i32: either demotion shows here
    x = np.array([1.0, -2.5, 1e300, 0.0])
    n = np.array([2**40, -(2**40), 7, 0], dtype=np.int64)
    got = run_iree(wide_types, x, n)
    assert [g.dtype for g in got] == [np.dtype(np.float64), np.dtype(np.int64)]
    assert_matches(got, evaluate(wide_types, x, n))
    assert got[0][3] == 1e-12 and got[1][0] == 3 * 2**40 + 1


@pytest.mark.parametrize("name", ["tuple_returns", "float_rule_bf16", "int_scalar", "nested_loops"])
def test_the_portable_artifact_runs_on_iree(name):
    fn = getattr(programs, name)
    args = arguments(fn)
    assert_matches(run_iree(fn, *args, portable=True), evaluate(fn, *args))


def test_a_module_is_compiled_once_per_shape():
    fn = programs.symbolic_shapes
    run_iree(fn, *arguments(fn, 4))
    cached = len(iree._MODULES)
    run_iree(fn, *arguments(fn, 4, seed=1))
    assert len(iree._MODULES) == cached
    run_iree(fn, *arguments(fn, 6))
    assert len(iree._MODULES) == cached + 1


def test_without_iree_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "iree.compiler", None)  # makes the import fail
    with pytest.raises(UnsupportedError, match=r"tilefoundry\[iree\]"):
        run_iree(wide_types, np.zeros(4), np.zeros(4, dtype=np.int64), portable=True)
