"""Refuse up front what the kernel cannot hold (DESIGN §1: an exit never discovers mid-lowering
that a well-typed op has no rule).

Before anything is traced, every op call of the body (loop bodies and fusion regions included)
must have a PALLAS rule, a call touching the cta mesh of an op with mesh semantics
(SHARDED_EVAL) must have a PALLAS_SHARDED rule, and no call may produce a Partial over the CTAs.
Each refusal is located at the call. What depends on the block plan (a reduction completing
across CTAs, a gathering Reshard) is refused when the call is traced, at the same location.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.exits.pallas.grid import fields
from tilefoundry.exits.pallas.kernel import check_rules, refuse_partials
from tilefoundry.ir.core import Call, Constant, Expr, Op, source_span
from tilefoundry.ir.hir import Function, FusionRegion
from tilefoundry.ir.hir.walk import all_operands
from tilefoundry.ir.types.shard import ShardLayout


def body_nodes(root: Expr) -> Iterator[Expr]:
    """Every node under `root`, producers before consumers (so the first refusal is where the
    trouble starts), loop bodies and fusion region bodies included."""
    done: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            done.add(node)
            yield node
            continue
        stack.append((node, True))
        children = list(all_operands(node))
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            children += list(node.target.outputs)
        stack.extend((c, False) for c in reversed(children) if c not in done)


def array_constants(fn: Function) -> tuple[Constant, ...]:
    """The body's constants that are arrays, not scalars: a kernel may not capture arrays, so
    each becomes one more (whole-array) input of the pallas_call."""
    return tuple(
        node
        for node in body_nodes(fn.body)
        if isinstance(node, Constant) and np.size(node.value) > 1
    )


def preflight(fn: Function) -> None:
    """Raise the first refusal of `fn`'s body, located at its call."""
    for call in body_nodes(fn.body):
        if not (isinstance(call, Call) and isinstance(call.target, Op)):
            continue
        op, out_type = call.target, call.type
        arg_types = tuple(a.type for a in call.args)
        every = [t for a in arg_types for t in fields(a)] + list(fields(out_type))
        on_mesh = any(isinstance(t.layout, ShardLayout) for t in every)
        try:
            check_rules(op, on_mesh)
            if on_mesh:
                refuse_partials(op, arg_types, out_type)
        except VerifyError as err:
            raise err.with_location(source_span(call)) from None
