"""Issue 28, Done when: random well-typed sharded programs run on the simulator, `run_xla` and
the SPMD exit with 0 unsound results, 0 late refusals and 0 internal errors, and random wrong
programs are refused when checked.

The programs and their numpy mirrors are `random_sharded`'s (independent of the code under test:
each op's meaning on global float64 arrays). "Unsound" is a result other than the mirror's; a
"late refusal" is a program typeinfer accepted that an exit then refuses (DESIGN §1: what check
accepts on a device mesh runs there); anything else raised is an internal error. The fast range
runs in CI; a longer one is marked slow.
"""

from __future__ import annotations

import numpy as np
import pytest

from exits.spmd import spmd_worker
from exits.spmd.random_sharded import valid, wrong
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.stablehlo.spmd import emit_spmd
from tilefoundry.ir.types.shard import B, ShardLayout

FAST = range(0, 40)
LONG = range(40, 400)


def _agrees(got, want) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4 * scale)


def _sharded_parameters(seeds) -> int:
    """How many programs take a parameter that is not replicated (so the run tests sharding)."""
    count = 0
    for seed in seeds:
        layouts = [p.type.layout for p in valid(seed).fn.params]
        count += any(isinstance(sl, ShardLayout) and set(sl.attrs) != {B} for sl in layouts)
    return count


def _check_valid(seeds, devices8) -> dict[str, list]:
    found: dict[str, list] = {"unsound": [], "late refusal": [], "internal error": []}
    runs = devices8.submit(spmd_worker.run_random, list(seeds))
    programs = {seed: valid(seed) for seed in seeds}
    for seed, program in programs.items():
        want = program.mirror(program.arguments)
        try:
            got = evaluate(program.fn, *program.arguments, complete_partials=True)
        except Exception as err:
            found["internal error"].append((seed, "simulator", repr(err)))
        else:
            if not _agrees(got, want):
                found["unsound"].append((seed, "simulator"))
        try:
            emit_spmd(program.fn)
        except (VerifyError, NotImplementedError) as err:
            found["late refusal"].append((seed, "SPMD exit", str(err)))
        except Exception as err:
            kind = "late refusal" if type(err).__name__ == "UnsupportedError" else "internal error"
            found[kind].append((seed, "SPMD exit", repr(err)))
    for seed, outcome in runs.result(timeout=600).items():
        if isinstance(outcome, str):
            kind = "late refusal" if outcome.startswith("UnsupportedError") else "internal error"
            found[kind].append((seed, "run_xla", outcome))
        elif not _agrees(outcome, programs[seed].mirror(programs[seed].arguments)):
            found["unsound"].append((seed, "run_xla"))
    return found


def _check_wrong(seeds) -> dict[str, list]:
    found: dict[str, list] = {"accepted": [], "internal error": []}
    for seed in seeds:
        what, build = wrong(seed)
        try:
            build()
        except VerifyError:
            continue
        except Exception as err:
            found["internal error"].append((seed, what, repr(err)))
        else:
            found["accepted"].append((seed, what))
    return found


def test_random_sharded_programs_are_sound_on_every_exit(devices8):
    assert _sharded_parameters(FAST) >= len(FAST) * 3 // 4
    assert _check_valid(FAST, devices8) == {"unsound": [], "late refusal": [], "internal error": []}


def test_random_wrong_programs_are_refused_when_checked():
    assert _check_wrong(FAST) == {"accepted": [], "internal error": []}


@pytest.mark.slow
def test_a_longer_range_of_random_sharded_programs(devices8):
    assert _check_valid(LONG, devices8) == {"unsound": [], "late refusal": [], "internal error": []}
    assert _check_wrong(LONG) == {"accepted": [], "internal error": []}
