"""The emitter's lowering cache (issue 19, "an emitter that lowers each (op, operand types) once and
replays it"): a replayed lowering is byte-identical to running the op's rule, renumbered for its
own SSA names, and a rule that reads more than (op, types) — a Constant operand's value through
`lw.call` — is never replayed for another call."""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Constant, Op, ParamDef, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.nn.softmax import SoftMax
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.lowering.replay import lower_cached
from tilefoundry.ir.types import f32, make_tensor_type
from tilefoundry.rules import STABLEHLO, register_stablehlo, register_typeinfer

T = make_tensor_type((2, 8), f32)


def _direct(op, operands, arg_types, out_type, start: int) -> tuple[list[str], object, int]:
    """The rule run as the emitter ran it before the cache: lines, result, names taken."""
    lw = Lowering(None, [start], indent=4)
    result = STABLEHLO.lookup(type(op))(op, operands, arg_types, out_type, lw)
    return lw.lines, result, lw._counter[0]


def _replayed(op, operands, arg_types, out_type, start: int) -> tuple[list[str], object, int]:
    lw = Lowering(None, [start], indent=4)
    rule = STABLEHLO.lookup(type(op))
    result = lower_cached(rule, op, operands, arg_types, out_type, lw)
    return lw.lines, result, lw._counter[0]


def test_same_types_different_numbering_replay_byte_identical():
    """Two calls with one key and different SSA numbering: each equals the rule run directly."""
    op = SoftMax(axis=-1)
    first = _replayed(op, ("%arg0",), (T,), T, start=0)
    second = _replayed(op, ("%17",), (T,), T, start=40)
    assert first == _direct(op, ("%arg0",), (T,), T, start=0)
    assert second == _direct(op, ("%17",), (T,), T, start=40)
    assert len(first[0]) > 3 and first[0] != second[0]  # a multi-line rule, renumbered
    assert "%40 = " in second[0][0] and "%17" in "\n".join(second[0])


def test_an_operand_used_twice_replays_as_one_name():
    """x * x and x * y share op and types but not aliasing; neither is replayed as the other."""
    op = Binary(kind=BinaryKind.MUL)
    same = _replayed(op, ("%3", "%3"), (T, T), T, start=9)
    other = _replayed(op, ("%3", "%4"), (T, T), T, start=9)
    assert same == _direct(op, ("%3", "%3"), (T, T), T, start=9)
    assert other == _direct(op, ("%3", "%4"), (T, T), T, start=9)


class _ScaleByLiteral(Op):
    """Test-only: x times the value of its Constant operand `k`, spelled into the text."""

    x = ParamDef("input")
    k = ParamDef("input")


@register_typeinfer(_ScaleByLiteral)
def _scale_type(op, arg_types, ctx):
    return arg_types[0]


@register_stablehlo(_ScaleByLiteral)
def _scale_stablehlo(op, operands, arg_types, out_type, lw):
    value = float(lw.call.args[1].value)  # reads the literal: not a function of (op, types)
    factor = lw.constant(value, out_type.dtype, lw.shape(out_type))
    return lw.elementwise("multiply", (operands[0], factor), out_type)


def _scaled_by(value: float) -> Function:
    x = Var("x", T)
    k = Constant(np.asarray(value, dtype=np.float32), make_tensor_type((), f32))
    fn = Function("scale", (x,), Call(_ScaleByLiteral(), (x, k)), T)
    TypeInferContext().infer(fn)
    return fn


def test_a_rule_reading_a_constant_value_is_not_replayed():
    """Same op and types, different literal: each module spells its own value."""
    from tilefoundry.exits.stablehlo import emit_stablehlo

    two, three = emit_stablehlo(_scaled_by(2.0)), emit_stablehlo(_scaled_by(3.0))
    factor = "stablehlo.constant dense<{}> : tensor<2x8xf32>"
    assert factor.format("2.0") in two and factor.format("3.0") not in two
    assert factor.format("3.0") in three and factor.format("2.0") not in three
