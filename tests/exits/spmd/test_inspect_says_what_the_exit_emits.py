"""`show`, `report` and the demo describe exactly what the SPMD exit emits (issue 15 item 4:
"one plan"): a Reshard's words are the steps of `plan_reshard`, the plan the exit emits, and
every other op's collectives (a complete-effect reduction's all-reduce, a loop body's
collectives) are read off the exit's own record of what it wrote."""

import io
import re

import pytest

from exits.spmd.sharded_programs import PROGRAMS, TP
from tilefoundry import DimVar, Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.exits.stablehlo.spmd import collective_report, lower_spmd_or_none
from tilefoundry.inspect.report import build_graph
from tilefoundry.inspect.shard_view import value_rows

ROWS = DimVar("ROWS", 1, 1024)


@func
def symbolic_split_sum(x: Tensor[(ROWS, 32 @ TP.tp), "f32"]):  # noqa: F821
    return tf.reduce(x, axes=(1,), keepdim=False, kind="sum")


def shown_rows(fn):
    """`show`'s layout table, given the exit's module as the CLI gives it."""
    return value_rows(fn, lower_spmd_or_none(fn))


KIND = re.compile(r": (all-reduce|reduce-scatter|all-gather|all-to-all)")


def listed_kinds(fn) -> list[str]:
    """The collectives the layout table lists, one per emitted collective."""
    return sorted(
        KIND.search(words).group(1).replace("-", "_")
        for row in shown_rows(fn)
        for words in row.collectives
        if KIND.search(words)
    )


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_show_lists_every_collective_the_exit_emits(name):
    fn = PROGRAMS[name].sharded
    emitted = sorted(e.kind for e in collective_report(fn) for _ in range(e.emitted))
    assert listed_kinds(fn) == emitted


def test_a_sum_over_a_split_axis_lists_its_all_reduce():
    """DESIGN §4.12: a Reduce over a Split axis has a complete effect, so the exit all-reduces
    there; `show` used to list nothing for it."""
    rows = {row.name: row for row in shown_rows(PROGRAMS["split_reductions"].sharded)}
    assert rows["total"].collectives == ("y: all-reduce(sum)",)
    assert rows["peak"].collectives == ("y: all-reduce(max)",)


def test_without_static_shapes_the_complete_effect_is_read_from_the_types():
    """The exit needs concrete shapes (emit takes --dim); `show` of a DimVar program still
    lists the all-reduce a reduction over a split axis implies (DESIGN §4.12)."""
    rows = [r for r in shown_rows(symbolic_split_sum) if r.op == "reduce"]
    assert [r.collectives for r in rows] == [("tp: all-reduce (completes the reduction)",)]


def test_partial_to_split_is_described_as_the_reduce_scatter_it_is():
    rows = shown_rows(PROGRAMS["partial_to_split"].sharded)
    assert [r.collectives for r in rows if r.collectives] == [("y: reduce-scatter(sum, dim 1)",)]


def test_a_loop_lists_its_body_collectives_once_per_iteration():
    (loop,) = [
        r for r in shown_rows(PROGRAMS["looped_sequence_parallel"].sharded) if r.op == "loop"
    ]
    assert loop.collectives == (
        "tp: all-gather x3 (once per loop iteration)",
        "tp: reduce-scatter(sum) x3 (once per loop iteration)",
    )


def test_the_report_graph_carries_the_same_words():
    graph = build_graph(
        PROGRAMS["split_reductions"].sharded,
        lower_spmd_or_none(PROGRAMS["split_reductions"].sharded),
    )
    words = sorted(w for node in graph.nodes for w in node.collectives)
    assert words == ["y: all-reduce(max)", "y: all-reduce(sum)", "y: all-reduce(sum)"]


def test_the_demo_states_the_exits_collectives():
    from tilefoundry.demo import _megatron_reference

    out = io.StringIO()
    _megatron_reference(out)
    words = "1 all_reduce over tp (sum) of 4096 B in, 4096 B out per device"
    assert f"the SPMD exit emits {words};" in out.getvalue()
