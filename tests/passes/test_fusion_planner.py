"""The fusion planner's two promises beyond its goldens: the regions it forms are the fixed point
of its rule (DESIGN §6: consumers grow toward producers until nothing joins), and it decides each
producer->member edge once, so planning is linear in the size of a region (issue 28 item 7: a
chain of 1,800 ops used to cost 2.7 million legality checks)."""

from __future__ import annotations

import importlib
import random

import pytest

from passes.random_programs import random_function
from tilefoundry.frontend import parse_source
from tilefoundry.ir.core import Call
from tilefoundry.ir.core.graph import post_order, users
from tilefoundry.passes import legalize
from tilefoundry.passes.fusion_rules import is_fusible_edge, should_fuse

fuse_module = importlib.import_module("tilefoundry.passes.fuse")  # `passes.fuse` is the function


def _chain_source(repeats: int) -> str:
    body = "\n".join("    h = tf.exp(h) * y + x" for _ in range(repeats))
    return (
        "from tilefoundry.dsl import tf\n"
        "from tilefoundry.frontend import Tensor, func\n\n\n"
        "@func\n"
        'def chain(x: Tensor[(4, 4), "f32"], y: Tensor[(4, 4), "f32"]):\n'
        "    h = x\n"
        f"{body}\n"
        "    return h\n"
    )


@pytest.mark.parametrize("seed", range(40))
def test_no_region_can_still_grow(seed):
    """The postcondition of "repeat until nothing joins": no member has a producer outside every
    region that the legality rule and the cost guard would both still let in (each block of the
    function, a loop body being one, is planned on its own)."""
    rng = random.Random(seed)
    fn = legalize(random_function(lambda options: options[rng.randrange(len(options))]))
    nodes = post_order((fn.body,))
    use = users(nodes)
    regions = fuse_module.plan_regions(fn.body)
    taken = {member for region in regions for member in region}
    for block, returned in fuse_module._blocks(fn.body, nodes):
        block_set = set(block)
        for region in (r for r in regions if r[0] in block_set):
            members = set(region)
            has_root = fuse_module.region_kind(region) != "loop"
            for member in region:
                for producer in member.args:
                    if producer in taken:
                        continue
                    assert not (
                        is_fusible_edge(
                            producer, member, members, use, block_set, returned, has_root
                        )
                        and should_fuse(producer, members, use)
                    ), f"seed {seed}: {producer} could still join the region of {member}"


def test_a_chain_decides_each_edge_once(monkeypatch):
    repeats = 200
    fn = legalize(parse_source(_chain_source(repeats), "<chain>")["chain"])
    edges = sum(len(n.args) for n in post_order((fn.body,)) if isinstance(n, Call))
    calls = 0

    def counting(*args, **kwargs):
        nonlocal calls
        calls += 1
        return is_fusible_edge(*args, **kwargs)

    monkeypatch.setattr(fuse_module, "is_fusible_edge", counting)
    (region,) = fuse_module.plan_regions(fn.body)
    assert len(region) == 3 * repeats
    assert calls <= edges
