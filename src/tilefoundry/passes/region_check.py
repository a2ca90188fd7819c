"""The verifier's FusionRegion rules: a region holds only fusible ops, at most one root (read
inside the region only by its elementwise/view epilogue), only view-like views, and leaks nothing
(SFEP-0053 §3.4 last bullet).

These restate the fusion legality rules (`fusion_rules`) as invariants of the finished region, so a
region built by hand or by a buggy pass is held to exactly what `fuse` may build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from tilefoundry.analysis import describe
from tilefoundry.ir.core import Call, Constant, Expr, Var
from tilefoundry.ir.core.graph import post_order, users
from tilefoundry.ir.hir import FusionRegion
from tilefoundry.passes.fusion_rules import (
    EPILOGUE_KINDS,
    ROOT_KINDS,
    fusion_kind,
    is_inlined_literal,
    view_like,
)
from tilefoundry.rules import FusionKind

Fail = Callable[[Expr, str], NoReturn]


def check_region(call: Call, fail: Fail, walk: list[Expr] | None = None) -> None:
    """Reject a region Call whose body breaks a fusion invariant; `fail(node, message)` raises.
    `walk` is `post_order(region.outputs)` when the caller has it already."""
    region: FusionRegion = call.target
    listed = set(region.body)
    for output in region.outputs:
        if output not in listed:
            fail(call, f"FusionRegion: output {describe(output)} is not a value of the body")
    if walk is None:
        walk = post_order(region.outputs)
    nodes = [n for n in walk if not isinstance(n, Var)]
    in_region = users(nodes)
    roots = []
    for node in nodes:
        if isinstance(node, Constant):
            if not is_inlined_literal(node):
                fail(node, "FusionRegion: a constant that needs storage is a region input, "
                     "not a body value")  # fmt: skip
            continue
        if node not in listed:
            fail(node, f"FusionRegion: {describe(node)} is computed by the body but not listed")
        kind = fusion_kind(node)
        if kind == FusionKind.BARRIER:
            fail(node, f"FusionRegion: holds non-fusible {describe(node)} (a fusion barrier)")
        if kind in ROOT_KINDS:
            roots.append(node)
            for reader in in_region.get(node, ()):
                if fusion_kind(reader) not in EPILOGUE_KINDS:
                    fail(node, f"FusionRegion: root {describe(node)} is consumed inside its region "
                         f"by {describe(reader)}; only an elementwise or view epilogue may read "
                         "a root")  # fmt: skip
        if kind == FusionKind.VIEW and not view_like(node, in_region.get(node, ()), in_region):
            fail(node, f"FusionRegion: holds {describe(node)}, which is not view-like here "
                 "(it would need a copy)")  # fmt: skip
    if len(roots) > 1:
        names = ", ".join(describe(r) for r in roots)
        fail(roots[1], f"FusionRegion: two roots ({names}) in one region; roots never fuse")
