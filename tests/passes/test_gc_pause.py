"""The compile stages pause the cyclic collector and hand their survivors to the oldest
generation (gc_pause.py): the collector must come back on, nothing may stay frozen, a caller's own
frozen objects must stay frozen, and cyclic garbage made during a stage is still collected."""

from __future__ import annotations

import gc
import weakref

from tilefoundry.gc_pause import gc_paused


class _Node:
    pass


@gc_paused
def _build(count: int) -> list:
    return [[_Node()] for _ in range(count)]


def test_collector_resumes_without_a_young_backlog():
    """Survivors of a paused stage do not count towards the next young collection."""
    assert gc.isenabled()
    kept = _build(20_000)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 1_000  # not the 40,000 allocations the stage made
    assert len(kept) == 20_000


def test_callers_frozen_objects_stay_frozen():
    """A process that froze its heap (before a fork) keeps it frozen across a paused stage."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        _build(100)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_cycles_made_while_paused_are_still_collected():
    """Moving survivors to the oldest generation delays, never loses, cyclic garbage."""

    @gc_paused
    def make_cycle() -> weakref.ref:
        node = _Node()
        node.self = node
        return weakref.ref(node)

    ref = make_cycle()
    assert ref() is not None  # a cycle is not freed by reference counting
    gc.collect()
    assert ref() is None
