"""Straight-line bodies: the nodes under a root in the order the interpreter's walk computes
them, with each node's last reads and releases worked out once.

Most bodies hold only Vars, Constants, Tuples and Op calls. For those the walk's work (a stack
of nodes, a memo check per visit, read counts kept up to date) is the same on every call, so
`straight_line` does it once per root and `Interpreter._run` replays the result: each Op call gets
the operands this is the last read of (`Step.dying`, where an EVAL_INTO rule may write) and drops
the ones nothing reads after it (`Step.releases`), exactly as the walk would.
"""

from __future__ import annotations

import enum

from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order, right_to_left

WALK_ORDER = right_to_left(BLOCK_OPERANDS)
"""The order the interpreter's walk computes a block in (last operand first)."""


class StepKind(enum.Enum):
    VAR = "var"
    CONSTANT = "constant"
    TUPLE = "tuple"
    CALL = "call"


class Step:
    """One node of a straight-line plan: what it is, the operands it reads, the operands this
    is the last read of (`dying`, as `_call_op` takes it) and the ones dropped after it."""

    __slots__ = ("dying", "kind", "node", "operands", "releases")

    def __init__(self, node: Expr, kind: StepKind, operands: tuple[Expr, ...]):
        self.node, self.kind, self.operands = node, kind, operands
        self.dying: dict[Expr, int] = {}
        self.releases: list[Expr] = []


def straight_line(root: Expr) -> list[Step] | None:
    """The nodes under `root` in the order `Interpreter.value`'s walk computes them, when they
    are only Vars, Constants, Tuples and Op calls (no loop, region or Function call, whose
    activations the walk handles); None otherwise."""
    order: list[Step] = []
    for node in post_order((root,), WALK_ORDER):
        if isinstance(node, Call) and isinstance(node.target, Op):
            kind = StepKind.CALL
        elif isinstance(node, Var):
            kind = StepKind.VAR
        elif isinstance(node, Constant):
            kind = StepKind.CONSTANT
        elif isinstance(node, Tuple):
            kind = StepKind.TUPLE
        else:
            return None
        order.append(Step(node, kind, node.block_operands()))
    remaining: dict[Expr, int] = {}
    for step in order:
        for operand in step.operands:
            remaining[operand] = remaining.get(operand, 0) + 1
    for step in order:
        step.dying = {c: 1 for c in step.operands if remaining[c] == 1}
        for operand in step.operands:
            remaining[operand] -= 1
            if remaining[operand] == 0 and operand is not root:
                step.releases.append(operand)
    return order
