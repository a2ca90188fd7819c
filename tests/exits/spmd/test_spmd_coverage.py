"""Every op with mesh semantics has an SPMD lowering (DESIGN §1: "whatever the type checker accepts
runs ... on every exit that takes its mesh kind"; §2: "A coverage test asserts that every
registered op has every rule, or is listed in one explicit, sorted 'fails closed at this exit'
set").

An op whose per-device semantics are more than "its rule on each device's block" registers a
SHARDED_EVAL rule for the mesh simulation; the SPMD exit must then carry out the same semantics
through an SPMD_LOWERING rule, or the program the simulator runs is refused on devices.
"""

from tilefoundry.rules import SHARDED_EVAL, SPMD_LOWERING

REFUSED_AT_THE_SPMD_EXIT: dict[str, str] = {}
"""Ops with mesh semantics that the SPMD exit refuses, each with why (sorted by name). Empty:
every op the simulator runs on a mesh is lowered."""


def _catalog(registry) -> set[str]:
    """The package's own op classes (test-only twins registered by other test modules are not
    ops of the system)."""
    return {c.__name__ for c in registry.registered() if c.__module__.startswith("tilefoundry.")}


def test_the_refused_set_is_sorted_and_justified():
    names = list(REFUSED_AT_THE_SPMD_EXIT)
    assert names == sorted(names)
    assert all(reason.strip() for reason in REFUSED_AT_THE_SPMD_EXIT.values())


def test_every_op_with_a_sharded_eval_rule_has_an_spmd_lowering_rule():
    missing = _catalog(SHARDED_EVAL) - _catalog(SPMD_LOWERING) - set(REFUSED_AT_THE_SPMD_EXIT)
    assert sorted(missing) == [], (
        f"{sorted(missing)} run on the mesh simulator (SHARDED_EVAL) but register no "
        "SPMD_LOWERING rule; add one in the op module, or list the op with its reason in "
        "REFUSED_AT_THE_SPMD_EXIT"
    )


def test_no_op_is_both_lowered_and_listed_as_refused():
    assert sorted(_catalog(SPMD_LOWERING) & set(REFUSED_AT_THE_SPMD_EXIT)) == []


def test_spmd_rules_exist_only_for_ops_with_mesh_semantics():
    """An SPMD rule without a SHARDED_EVAL twin would make the exit compute something the
    simulator has no rule for, so the two could silently disagree."""
    assert sorted(_catalog(SPMD_LOWERING) - _catalog(SHARDED_EVAL)) == []
