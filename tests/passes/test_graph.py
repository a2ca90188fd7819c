"""The graph plumbing every pass shares (ir/core/graph.py, passes/graph.py): the one canonical
post-order, and the rebuilder's copies, which keep a node's type when only its operands'
identities changed."""

from __future__ import annotations

import random

from passes.builders import T8, binary, unary
from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Constant, Expr, SourceSpan, Tuple, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.types import TensorType, f32, f64
from tilefoundry.passes.graph import copy_call


def _recursive_post_order(roots: tuple[Expr, ...]) -> list[Expr]:
    """The definition the graph docstring gives: visit each unvisited operand left to right,
    then emit the node (written recursively, independently of the iterative walk)."""
    order: list[Expr] = []
    seen: set[Expr] = set()

    def visit(node: Expr) -> None:
        if node in seen:
            return
        seen.add(node)
        for operand in node.operands():
            visit(operand)
        order.append(node)

    for root in roots:
        visit(root)
    return order


def _random_dag(rng: random.Random, size: int) -> list[Expr]:
    """Values with random sharing, then a few Tuples of them (shared tuple elements too)."""
    nodes: list[Expr] = [Var(f"p{i}", T8) for i in range(3)]
    for _ in range(size):
        if rng.random() < 0.2:
            nodes.append(unary("neg", rng.choice(nodes)))
        else:
            nodes.append(binary(rng.choice(["add", "mul"]), rng.choice(nodes), rng.choice(nodes)))
    tuples = [Tuple((rng.choice(nodes), rng.choice(nodes))) for _ in range(2)]
    return nodes + tuples


def test_post_order_is_the_recursive_definition_on_shared_dags():
    """DESIGN §6 "printed form is stable": every pass walks the one canonical order, operands
    left to right before users, each shared node once, for one root or several."""
    rng = random.Random(7)
    for _ in range(40):
        nodes = _random_dag(rng, rng.randint(1, 30))
        roots = tuple(rng.sample(nodes, k=min(3, len(nodes))))
        assert post_order(roots) == _recursive_post_order(roots)
        assert post_order((nodes[-1],)) == _recursive_post_order((nodes[-1],))


def test_a_copy_with_same_typed_operands_keeps_the_original_type_and_metadata():
    """A rebuilt Call whose operands changed identity but not type has the original's type (its
    rule reads only the op and operand types), target and source span, without being re-typed."""
    x, y = Var("x", T8), Var("y", T8)
    span = SourceSpan("prog.py", 3, 5)
    call = Call(binary("add", x, y).target, (x, y), metadata=(span,))
    TypeInferContext().infer(call)
    replacement = unary("neg", x)
    ctx = TypeInferContext()
    copy = copy_call(call, (replacement, y), ctx)
    assert copy is not call
    assert copy.target == call.target and copy.args == (replacement, y)
    assert copy.type == TensorType((8,), f32)
    assert copy.metadata == (span,)
    assert copy_call(call, (x, y), ctx) is call


def test_a_copy_whose_operand_type_changed_is_retyped():
    """When an operand's type differs (here f32 -> f64), the copy's type is re-derived, not
    copied from the original."""
    x, y = Var("x", T8), Var("y", T8)
    call = binary("add", x, y)
    wide_x, wide_y = Var("x", TensorType((8,), f64)), Var("y", TensorType((8,), f64))
    copy = copy_call(call, (wide_x, wide_y), TypeInferContext())
    assert copy.type == TensorType((8,), f64)


def test_a_copy_with_a_new_literal_is_retyped():
    """A literal operand may be read by its user's rule, so a new literal (even of the same
    type) makes the copy re-typed rather than assumed."""
    x = Var("x", T8)
    one, two = Constant(1.0), Constant(2.0)
    call = binary("mul", x, one)
    copy = copy_call(call, (x, two), TypeInferContext())
    assert copy is not call and copy.args[1] is two
    assert copy.type == TensorType((8,), f32)
