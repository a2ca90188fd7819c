"""Reverse mode through a loop (issue 25 item 4): a GridRegionExpr differentiates as a scan does.

For a loop of n iterations over carries `c` that reads outer values `w` (its frontier: a stacked
weight read through a window `w[layer]`, a constant), the transform builds

- the forward loop, extended to stack what the backward reads and cannot recompute cheaply
  (`residuals`): each such value is written into row m of an `(n, ...)` buffer it carries;
- a backward loop, plain typed HIR: iteration j replays forward iteration n - 1 - j (its carries
  read back from their stacks, its induction variable computed from j), runs the body's VJP
  rules on it (the same reverse walk as the straight-line program, stopping at the carries and
  the frontier), and carries the carries' cotangents and one gradient accumulator per
  differentiated frontier value. A window's cotangent is added into its window of the
  accumulator (`dynamic_update_slice` of the window plus the cotangent), not into a whole zero
  buffer, so a stacked weight's gradient costs one layer's worth of work per iteration.

Every collective the body's rules place (a pending sum completed where its value is read) stays
inside the backward loop, once per iteration, like the forward's. The carried cotangents take
fixed types (their carries' own, pending sums completed: `reshard_policy.cotangent_type`), so a
carried cotangent that pends a sum at the end of an iteration is completed there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tilefoundry.autodiff.builder import Builder
from tilefoundry.autodiff.cotangents import Cotangent
from tilefoundry.autodiff.reshard_policy import conformed, cotangent_type
from tilefoundry.autodiff.residuals import (
    empty_stack,
    read_row,
    stack_type,
    stacked_values,
    write_row,
)
from tilefoundry.autodiff.rewrite import substitute
from tilefoundry.autodiff.varied import carry_readers, differentiated_carries, frontier
from tilefoundry.ir.core import Call, Expr, Tuple, Var, binding_name
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.hir.grid_region import INDUCTION_TYPE
from tilefoundry.passes.graph import typed_node
from tilefoundry.rules import surface_entry

if TYPE_CHECKING:  # backward imports this module
    from tilefoundry.autodiff.backward import Backward


def loop_vjp(
    walk: Backward, loop: GridRegionExpr, total: Cotangent, varied: set[Expr], ad: Builder
) -> list[tuple[Expr, Expr]]:
    """(value, cotangent contribution) for the loop's differentiated initial values and frontier
    values, given the cotangent `total` of the loop's value; `walk` is the reverse walk
    (`backward.Backward`), which differentiates the body and records the extended forward loop."""
    count, start, step = _trip(loop, ad)
    outer = frontier(loop)
    carried = differentiated_carries(loop, varied)
    wanted = [f for f in outer if f in varied]
    cotangents = total if len(loop.carried_args) > 1 else (total,)
    if count == 0:  # the loop is the identity on its carries
        return [(loop.init_args[k], cotangents[k]) for k in carried if cotangents[k] is not None]

    ctx = ad.ctx
    phis = loop.carried_args
    j = Var(loop.induction_var.name, INDUCTION_TYPE)
    placeholders = {phi: Var(phi.name, phi.type) for phi in phis}
    index = _forward_index(j, start, step, count, ad)
    replay = substitute(
        loop.yield_values, {loop.induction_var: index, **placeholders}, ctx, stop=outer
    )
    carry_types = [cotangent_type(phis[k].type) for k in carried]
    d_carries = [Var(f"d_{phis[k].name}", t) for k, t in zip(carried, carry_types, strict=True)]
    d_outer = [Var(f"d_{_name(f)}", cotangent_type(f.type)) for f in wanted]
    totals = walk.region(
        [replay[loop.yield_values[k]] for k in carried],
        d_carries,
        leaves=(*placeholders.values(), *outer),
        varied_leaves=(*(placeholders[phis[k]] for k in carried), *wanted),
    )
    yields = [
        conformed(_or_zeros(totals[placeholders[phis[k]]], t, ad), t, ad)
        for k, t in zip(carried, carry_types, strict=True)
    ]
    yields += [_accumulated(a, totals[f], ad) for a, f in zip(d_outer, wanted, strict=True)]
    yields = _substituted(yields, walk.replaced, outer, ctx)

    originals = {new: old for old, new in replay.items() if new is not old}
    del originals[index]
    stacked = stacked_values(yields, originals, carry_readers(loop, outer), outer)
    if stacked:
        stacks = _extended_forward(walk, loop, [originals[s] for s in stacked], count, ad)
        reads = {
            s: read_row(stack, j, s.type, ad, scale=-1, offset=count - 1)
            for s, stack in zip(stacked, stacks, strict=True)
        }
        yields = _substituted(yields, reads, outer, ctx)

    inits = [
        conformed(_or_zeros(cotangents[k], t, ad), t, ad)
        for k, t in zip(carried, carry_types, strict=True)
    ]
    inits += [ad.zeros_of(a.type) for a in d_outer]
    results = _loop_values(j, (*d_carries, *d_outer), inits, yields, count, ad)
    contributions = [
        (loop.init_args[k], value)
        for k, value in zip(carried, results, strict=False)
        if loop.init_args[k] in varied
    ]
    contributions += list(zip(wanted, results[len(carried) :], strict=True))
    return contributions


def _trip(loop: GridRegionExpr, ad: Builder) -> tuple[int, int, int]:
    """(iterations, start, step): reverse mode needs the trip count when it builds the stacks."""
    bounds = (loop.start, loop.extent, loop.step)
    if not all(isinstance(b, int) for b in bounds):
        ad.refuse(
            "reverse-mode differentiation through a loop needs compile-time bounds (its stacks "
            "hold one row per iteration)",
            "bind the loop's bounds to ints, or differentiate a variant of fixed shape",
        )
    start, stop, step = bounds
    return len(range(start, stop, step)), start, step


def _forward_index(j: Var, start: int, step: int, count: int, ad: Builder) -> Expr:
    """The forward induction value of backward iteration j: start + step * (count - 1 - j)."""
    last = ad.scalar(start + step * (count - 1), j)
    return ad.tf.sub(last, j if step == 1 else ad.tf.mul(j, ad.scalar(step, j)))


def _forward_row(loop: GridRegionExpr, start: int, step: int, ad: Builder):
    """(row value, window attributes) of the forward iteration's stack row (i - start) / step."""
    i = loop.induction_var
    if step == 1:
        return i, {"offset": -start}
    return ad.tf.floor_div(ad.tf.sub(i, ad.scalar(start, i)), ad.scalar(step, i)), {}


def _extended_forward(
    walk: Backward, loop: GridRegionExpr, values: Sequence[Expr], count: int, ad: Builder
) -> list[Expr]:
    """The stacks of `values` (forward body values, or carries at an iteration's start): the
    forward loop extended to carry and fill them replaces `loop` (`walk.replaced`)."""
    _, start, step = _trip(loop, ad)
    types = [stack_type(v.type, count) for v in values]
    stacks = [Var(f"{_name(v)}_stack", t) for v, t in zip(values, types, strict=True)]
    row, window = _forward_row(loop, start, step, ad)
    writes = [
        write_row(stack, value, row, ad, **window)
        for stack, value in zip(stacks, values, strict=True)
    ]
    yields = (*loop.yield_values, *writes)
    inits = (*loop.init_args, *(empty_stack(t, ad) for t in types))
    extended = GridRegionExpr(
        loop.induction_var, (*loop.carried_args, *stacks), inits, Tuple(yields), yields,
        loop.extent, loop.step, loop.start, metadata=loop.metadata,
    )  # fmt: skip
    extended = typed_node(extended, ad.ctx)
    fields = [ad.tf.tuple_get_item(extended, index=k) for k in range(len(yields))]
    carries = len(loop.carried_args)
    walk.replaced[loop] = fields[0] if carries == 1 else Tuple(tuple(fields[:carries]))
    return fields[carries:]


def _loop_values(
    j: Var, carries: Sequence[Var], inits: Sequence[Expr], yields: Sequence[Expr], count: int, ad
) -> list[Expr]:
    """The backward loop over j in range(count) and its final carries."""
    body = yields[0] if len(yields) == 1 else Tuple(tuple(yields))
    backward = typed_node(
        GridRegionExpr(j, tuple(carries), tuple(inits), body, tuple(yields), count, 1, 0,
                       metadata=ad.metadata),
        ad.ctx,
    )  # fmt: skip
    if len(carries) == 1:
        return [backward]
    return [ad.tf.tuple_get_item(backward, index=k) for k in range(len(carries))]


def _accumulated(accumulator: Var, total: Expr | None, ad: Builder) -> Expr:
    """`accumulator` plus one iteration's cotangent of a frontier value: into its window when the
    cotangent is a window written into zeros (a stacked weight's `w[layer]`)."""
    if total is None:
        return accumulator
    window = _window_into_zeros(total)
    if window is None:
        return ad.tf.add(accumulator, conformed(total, accumulator.type, ad))
    update, start, attrs = window
    size = update.type.shape[attrs["axis"] % update.type.rank]
    current = ad.tf.dynamic_slice(accumulator, start, size=size, **attrs)
    added = ad.tf.add(current, conformed(update, current.type, ad))
    return ad.tf.dynamic_update_slice(accumulator, added, start, **attrs)


def _window_into_zeros(value: Expr) -> tuple[Expr, Expr, dict] | None:
    """(update, start, window attributes) when `value` is `dynamic_update_slice(zeros, ...)`."""
    if not (_is_op(value, "dynamic_update_slice") and _is_zeros(value.args[0])):
        return None
    op = value.target
    _, update, start = value.args
    return update, start, {"axis": op.axis, "scale": op.scale, "offset": op.offset}


def _is_zeros(value: Expr) -> bool:
    while _is_op(value, "reshard"):
        value = value.args[0]
    return _is_op(value, "zeros")


def _is_op(value: Expr, surface: str) -> bool:
    return isinstance(value, Call) and type(value.target) is surface_entry(surface).op_class


def _or_zeros(cotangent: Expr | None, type_, ad: Builder) -> Expr:
    return ad.zeros_of(type_) if cotangent is None else cotangent


def _substituted(values: list[Expr], replacements, outer, ctx) -> list[Expr]:
    if not replacements:
        return values
    memo = substitute(values, replacements, ctx, stop=outer)
    return [memo[v] for v in values]


def _name(value: Expr) -> str:
    return binding_name(value) or getattr(value, "name", None) or "residual"
