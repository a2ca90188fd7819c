"""Refuse up front what the kernel cannot hold (DESIGN §1: an exit never discovers mid-lowering
that a well-typed op has no rule).

Before anything is traced, every op call of the body (loop bodies and fusion regions included)
must have a PALLAS rule, a call touching the cta mesh of an op with mesh semantics
(SHARDED_EVAL) must have a PALLAS_SHARDED rule, and no call may produce a Partial over the CTAs.
Each refusal is located at the call. What depends on the block plan (a reduction completing
across CTAs, a gathering Reshard) is refused when the call is traced, at the same location.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.exits.pallas.grid import fields
from tilefoundry.exits.pallas.kernel import check_rules, refuse_partials
from tilefoundry.ir.core import Call, Constant, Expr, Op, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion
from tilefoundry.ir.types.shard import ShardLayout


def body_nodes(root: Expr) -> list[Expr]:
    """Every node under `root`, producers before consumers (so the first refusal is where the
    trouble starts), loop bodies and fusion region bodies included."""
    return post_order((root,), _with_region_bodies)


def _with_region_bodies(node: Expr) -> tuple[Expr, ...]:
    if isinstance(node, Call) and isinstance(node.target, FusionRegion):
        return (*node.args, *node.target.outputs)
    return node.operands()


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
