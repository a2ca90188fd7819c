"""The SPMD exit computes what the mesh simulation computes, op by op (DESIGN §4.12: "The
unsharded result and the gathered sharded result must agree"; §1: "whatever the type checker
accepts runs — on the simulator and on every exit that takes its mesh kind").

Every op sample x per-mesh-axis input state that typeinfer accepts (a seeded sample of them, on
4 devices in a row and on a 2x2 mesh) runs through the SPMD exit on XLA devices and through
`tilefoundry.evaluator.evaluate`; see `spmd_property` for how the programs are built and which
combinations no program can express (counted, and printed with the totals).
"""

import pytest

from exits.spmd import spmd_property
from tilefoundry.rules import SHARDED_EVAL, VALIDATION_SAMPLES

pytest.importorskip("jax", reason="the SPMD exit tests need jax[lib]")

SEED = 0


@pytest.fixture(scope="module")
def tally(devices8):
    return devices8.submit(spmd_property.run, SEED).result(timeout=600)


def _summary(tally) -> str:
    lines = [
        f"SPMD exit vs simulator: {tally.cases} accepted combinations sampled (seed {SEED}), "
        f"{tally.agreed} agreed, {len(tally.failures)} failed, in {tally.programs} programs",
        *(f"  skipped {n}: {reason}" for reason, n in sorted(tally.skipped.items())),
        "  per op: " + ", ".join(f"{op} {n}" for op, n in sorted(tally.per_op.items())),
        *(f"  simulator refuses: {line}" for line in tally.sim_refusals),
        *(f"  exit refuses up front: {line}" for line in tally.exit_refusals),
    ]
    return "\n".join(lines)


@pytest.mark.slow
def test_the_exit_agrees_with_the_simulator_on_every_sampled_combination(tally, capsys):
    with capsys.disabled():  # the counts are part of the result: always shown
        print("\n" + _summary(tally))
    assert tally.failures == [], "\n".join(tally.failures[:20]) + "\n" + _summary(tally)


def test_the_exit_refusals_allowed_are_sorted_and_justified():
    phrases = list(spmd_property.REFUSED_UP_FRONT)
    assert phrases == sorted(phrases)
    assert all(why.strip() for why in spmd_property.REFUSED_UP_FRONT.values())


def test_every_op_with_mesh_semantics_is_exercised(tally):
    """Not vacuous: each sampled op whose mesh semantics differ from "its rule on the block"
    (a SHARDED_EVAL rule, hence an SPMD_LOWERING rule) agreed on at least one combination."""
    special = {
        c.__name__
        for c in SHARDED_EVAL.registered()
        if c.__module__.startswith("tilefoundry.")
        and not isinstance(VALIDATION_SAMPLES.lookup(c)(), str)
    }
    assert sorted(special - set(tally.per_op)) == [], _summary(tally)
    assert tally.agreed >= 150, _summary(tally)
