"""Every exit checks its inputs exactly as `evaluate` does (issue 15 item 7, issue 20 "Every exit
checks its inputs as `evaluate` does (count, shape, dtype — never a reinterpretation)"; DESIGN §3:
"Bad inputs at evaluation time (wrong count, shape, dtype ...) raise `EvalError(ValueError)`").

Before this check an int32 array given to `run_xla` for an f32 parameter was bit-reinterpreted
([1, 2, 3, 4] came back as denormals printed as [0, 0, 0, 0]) and float64 / a Python list raised
jax's raw RuntimeProgramInputMismatch."""

from __future__ import annotations

import numpy as np
import pytest

from support.functions import call, function_of
from support.toy_ops import Add
from tilefoundry.errors import EvalError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types import DimVar, f32, make_tensor_type

pytest.importorskip("jax", reason="run_xla needs jax")

from tilefoundry.exits.runtimes.xla import run_xla

N = DimVar("N", 1, 64)


def doubled():
    return function_of({"x": make_tensor_type((4,), f32)}, lambda x: call(Add(), x, x))


def doubled_n():
    return function_of({"x": make_tensor_type((N,), f32)}, lambda x: call(Add(), x, x))


BAD_INPUTS = [
    # (what, arguments, message fragment naming the parameter and the fix)
    ("int32 for f32", (np.arange(1, 5, dtype=np.int32),), r"parameter 'x' is f32 .* int32.*astype"),
    ("float64 for f32", (np.ones(4),), r"parameter 'x' is f32 .* float64.*astype"),
    ("float16 for f32", (np.ones(4, np.float16),), r"parameter 'x' is f32 .* float16"),
    ("a Python list of ints", ([1, 2, 3, 4],), r"parameter 'x' is f32 .* int64"),
    ("a ragged list", ([[1.0], [1.0, 2.0]],), r"parameter 'x'.*not an array"),
    ("a wrong extent", (np.ones(5, np.float32),), r"parameter 'x' axis 0 has extent 4, got 5"),
    ("a wrong rank", (np.ones((2, 2), np.float32),), r"parameter 'x' has rank 1"),
    ("too many", (np.ones(4, np.float32),) * 2, r"expected 1 argument\(s\) \(x\), got 2"),
    ("too few", (), r"expected 1 argument\(s\) \(x\), got 0"),
]


@pytest.mark.parametrize("engine", ["evaluate", "run_xla"])
@pytest.mark.parametrize(("what", "arrays", "match"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_every_exit_refuses_bad_inputs_like_evaluate(engine, what, arrays, match):
    run = evaluate if engine == "evaluate" else run_xla
    with pytest.raises(EvalError, match=match):
        run(doubled(), *arrays)


def test_run_xla_refuses_an_extent_outside_the_dimvar_envelope():
    with pytest.raises(EvalError, match=r"N=70 lies outside its envelope \[1, 64\)"):
        run_xla(doubled_n(), np.ones(70, np.float32))


def test_run_xla_on_good_inputs_still_agrees_with_numpy():
    x = np.arange(1, 5, dtype=np.float32)
    np.testing.assert_array_equal(run_xla(doubled(), x), x + x)
    np.testing.assert_array_equal(run_xla(doubled_n(), x[:3]), x[:3] + x[:3])


@pytest.mark.slow
def test_the_executable_cache_is_bounded():
    """Issue 20: run_xla's cache held every function ever run (a program re-parsed in a loop
    grew memory without bound)."""
    from tilefoundry.exits.runtimes import xla

    x = np.ones(4, np.float32)
    alive = [doubled() for _ in range(xla.CACHED_EXECUTABLES + 5)]  # a dropped one frees itself
    for fn in alive:
        run_xla(fn, x)
    assert len(xla._EXECUTABLES) == xla.CACHED_EXECUTABLES
    fn = doubled()
    run_xla(fn, x)
    run_xla(fn, x)  # a hit moves to the back, compiling nothing new
    assert next(reversed(xla._EXECUTABLES))[0] == id(fn)


def test_a_mesh_larger_than_one_process_can_hold_is_refused_before_lowering():
    """Issue 20: "device counts checked before any mesh is built". A 4,096-device mesh used to be
    lowered and compiled for a long time before XLA's CPU client failed; the count alone decides
    (at most 2,048 devices per CPU process), so run_xla refuses it before building the module."""
    from tilefoundry.errors import UnsupportedError
    from tilefoundry.ir.types import make_shard_tensor_type
    from tilefoundry.ir.types.shard import Split, make_mesh

    mesh = make_mesh((4096,), ("d",))
    sharded = make_shard_tensor_type((4096,), f32, mesh=mesh, attrs=(Split(0),))
    fn = function_of({"x": sharded}, lambda x: call(Add(), x, x))
    with pytest.raises(UnsupportedError, match=r"4096 devices.*at most 2048.*2 processes"):
        run_xla(fn, np.ones(4096, np.float32), devices=4096)
