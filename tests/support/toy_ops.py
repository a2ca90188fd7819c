"""Toy ops for testing the IR machinery before (and independently of) the real op catalog.

They live under `tests`, so a coverage test over `tilefoundry.*` ops never sees them. Their rules
are deliberately trivial: each returns a type derived directly from its arguments, which lets the
tests of elaboration, loops and printing say exactly what flows where.
"""

from __future__ import annotations

from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.ir.types.shard import ShardLayout
from tilefoundry.rules import register_stablehlo, register_typeinfer


class Ident(Op):
    """Pass-through: the result has the argument's full type, layout and all."""

    mnemonic = "ident"

    x = ParamDef("input")


class Add(Op):
    """Elementwise on two values of one type."""

    mnemonic = "add"

    lhs = ParamDef("input")
    rhs = ParamDef("input")


class Pick(Op):
    """Tuple projection (the real TupleGetItem belongs to the op catalog)."""

    mnemonic = "pick"

    t = ParamDef("input")
    index = ParamDef("attribute", int)


class Relayout(Op):
    """Carries a ShardLayout attribute, as Reshard does, so printers can be tested on one."""

    mnemonic = "relayout"

    x = ParamDef("input")
    layout = ParamDef("attribute", ShardLayout)


@register_typeinfer(Ident)
def _ident(op, arg_types, ctx):
    return arg_types[0]


@register_typeinfer(Add)
def _add(op, arg_types, ctx):
    lhs, rhs = arg_types
    if lhs != rhs:
        ctx.error(ctx.call, f"operands differ: {lhs} vs {rhs}")
    return lhs


@register_typeinfer(Pick)
def _pick(op, arg_types, ctx):
    (tuple_type,) = arg_types
    if not isinstance(tuple_type, TupleType) or not 0 <= op.index < len(tuple_type.fields):
        ctx.error(ctx.call, f"index {op.index} does not select a field of {tuple_type}")
    return tuple_type.fields[op.index]


@register_typeinfer(Relayout)
def _relayout(op, arg_types, ctx):
    (x,) = arg_types
    return TensorType(x.shape, x.dtype, op.layout, x.storage)


@register_stablehlo(Ident)
def _ident_stablehlo(op, operands, arg_types, out_type, lw):
    return operands[0]


@register_stablehlo(Add)
def _add_stablehlo(op, operands, arg_types, out_type, lw):
    return lw.elementwise("add", operands, out_type)


@register_stablehlo(Pick)
def _pick_stablehlo(op, operands, arg_types, out_type, lw):
    return operands[0][op.index]
