"""One op, one spelling (issue 24 item 5): the printer names an op by its DSL name (DESIGN §3's
`tf.<name>`), not by its class: `broadcast_to` where the class is BroadcastTo, and `add`, not
`binary[kind=add]`."""

from __future__ import annotations

import pytest

from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.hir.nn import LayerNorm, MatMul, RMSNorm, SoftMax
from tilefoundry.ir.hir.tensor import BroadcastTo, Reduce, ReduceKind, TupleGetItem
from tilefoundry.ir.hir.tensor.cumulative import Cumulative, CumulativeKind
from tilefoundry.ir.hir.tensor.iota import Iota
from tilefoundry.ir.text.printer import op_spelling
from tilefoundry.ir.types import i32
from tilefoundry.rules import surface_entry

# DESIGN §3: "each Binary kind too (add, sub, mul, div, floor_div, mod, minimum, maximum, cmp_eq,
# cmp_ne, cmp_lt, cmp_le, cmp_gt, cmp_ge, logical_and, logical_or)"
BINARY_NAMES = {
    BinaryKind.ADD: "add",
    BinaryKind.SUB: "sub",
    BinaryKind.MUL: "mul",
    BinaryKind.DIV: "div",
    BinaryKind.FLOOR_DIV: "floor_div",
    BinaryKind.MOD: "mod",
    BinaryKind.MIN: "minimum",
    BinaryKind.MAX: "maximum",
    BinaryKind.EQ: "cmp_eq",
    BinaryKind.NE: "cmp_ne",
    BinaryKind.LT: "cmp_lt",
    BinaryKind.LE: "cmp_le",
    BinaryKind.GT: "cmp_gt",
    BinaryKind.GE: "cmp_ge",
    BinaryKind.AND: "logical_and",
    BinaryKind.OR: "logical_or",
}
# DESIGN §3: "each Unary kind is a function (exp, log, neg, abs, rsqrt, square, ceil, round, exp2,
# log2, logical_not)"; UnaryKind.RELU is spelled by nn.ReLU (`relu`), not as a Unary.
UNARY_NAMES = {
    UnaryKind.EXP: "exp",
    UnaryKind.LOG: "log",
    UnaryKind.NEG: "neg",
    UnaryKind.ABS: "abs",
    UnaryKind.RSQRT: "rsqrt",
    UnaryKind.SQUARE: "square",
    UnaryKind.CEIL: "ceil",
    UnaryKind.ROUND: "round",
    UnaryKind.EXP2: "exp2",
    UnaryKind.LOG2: "log2",
    UnaryKind.NOT: "logical_not",
}

CASES = [
    *((Binary(kind=kind), name, {}) for kind, name in BINARY_NAMES.items()),
    *((Unary(kind=kind), name, {}) for kind, name in UNARY_NAMES.items()),
    (BroadcastTo(shape=(4, 8)), "broadcast_to", {"shape": (4, 8)}),
    (RMSNorm(), "rms_norm", {"eps": 1e-6}),
    (LayerNorm(), "layer_norm", {"eps": 1e-5}),
    (TupleGetItem(index=1), "tuple_get_item", {"index": 1}),
    (MatMul(), "matmul", {}),
    (SoftMax(axis=-1), "softmax", {"axis": -1}),
    (Cumulative(axis=1, kind=CumulativeKind.MAX), "cummax", {"axis": 1, "reverse": False}),
    # `tf.arange` spells an Iota too, but in numpy's arguments (a rewrite): the printed attributes
    # are the schema's, which `tf.iota` takes
    (
        Iota(shape=(8,), dtype=i32),
        "iota",
        {"shape": (8,), "dtype": i32, "axis": 0, "start": 0, "step": 1},
    ),
    (
        Reduce(axes=(1,), keepdim=False, kind=ReduceKind.SUM),
        "reduce",
        {"axes": (1,), "keepdim": False, "kind": ReduceKind.SUM},
    ),
]


@pytest.mark.parametrize(("op", "name", "attrs"), CASES, ids=[c[1] for c in CASES])
def test_an_op_prints_as_its_dsl_name(op, name, attrs):
    assert op_spelling(op) == (name, attrs)


@pytest.mark.parametrize(("op", "name", "attrs"), CASES, ids=[c[1] for c in CASES])
def test_the_printed_spelling_read_back_through_the_dsl_is_the_same_op(op, name, attrs):
    """`tf.<printed name>(..., **printed attributes)` builds the op that was printed."""
    entry = surface_entry(name)
    assert entry.op_class(**entry.fixed, **attrs) == op


class Declared(Op):
    mnemonic = "declared_name"
    x = ParamDef("input")


class Undeclared(Op):
    x = ParamDef("input")


def test_an_op_outside_the_dsl_prints_as_it_declares_else_as_its_class():
    assert op_spelling(Declared()) == ("declared_name", {})
    assert op_spelling(Undeclared()) == ("Undeclared", {})
    assert op_spelling(Unary(kind=UnaryKind.RELU)) == ("Unary", {"kind": UnaryKind.RELU})
