"""The straight-line plan and the in-place writes change how a body is run, never what it
computes: on random programs (loops, broadcasts, shared operands, literals, reductions) the
evaluator gives bit for bit what its general walk gives without writing over anything, before and
after `compile` (whose fusion regions run through the plan too).

A differential check between two paths of one walk: the walk itself is held to independent numpy
by the op kernel tests and tests/evaluator/test_interpreter.py. Issue 19: the evaluator's speed
work must not weaken the oracle's numerics.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from passes.random_programs import random_arguments, random_function
from tilefoundry.evaluator import evaluate
from tilefoundry.evaluator import interpreter as interpreter_module
from tilefoundry.passes import compile
from tilefoundry.rules import EVAL_INTO


def _fields(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _program(seed: int):
    rng = random.Random(seed)
    return random_function(lambda options: rng.choice(list(options)), name=f"p{seed}")


@pytest.mark.parametrize("seed", range(40))
def test_plan_and_in_place_writes_match_the_plain_walk(seed, monkeypatch):
    args = random_arguments(seed)
    with np.errstate(all="ignore"):
        fn = _program(seed)
        fast = [evaluate(fn, *args), evaluate(compile(fn)[0], *args)]
        # Fresh Functions (call sites are kept per Function), run with no plan and no EVAL_INTO.
        monkeypatch.setattr(interpreter_module, "straight_line", lambda root: None)
        monkeypatch.setattr(EVAL_INTO, "_rules", {})
        plain_fn = _program(seed)
        plain = [evaluate(plain_fn, *args), evaluate(compile(plain_fn)[0], *args)]
    for got, want in zip(fast, plain, strict=True):
        for a, b in zip(_fields(got), _fields(want), strict=True):
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)  # NaNs compare equal here
    np.testing.assert_array_equal(args[0], random_arguments(seed)[0])  # inputs untouched
