"""Every VerifyError about IR whose nodes carry a SourceSpan ends with `at file:line:col`."""

import pytest

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Op, ParamDef, SourceSpan, Var
from tilefoundry.ir.hir import Function, GridRegionExpr
from tilefoundry.ir.hir.grid_region import INDUCTION_TYPE
from tilefoundry.ir.types import DimVar, TupleType, UnitType, f32, i32, make_tensor_type
from tilefoundry.rules import register_typeinfer

T = make_tensor_type((4,), f32)
I = make_tensor_type((4,), i32)


def at(line):
    return (SourceSpan("src.py", line, 3),)


class Strict(Op):
    x = ParamDef("input")


class Effectful(Op):
    x = ParamDef("input")


class NoRule(Op):
    x = ParamDef("input")


@register_typeinfer(Strict)
def _strict(op, arg_types, ctx):
    if arg_types[0].dtype != f32:
        ctx.error(op, "wants f32")
    return arg_types[0]


@register_typeinfer(Effectful)
def _effectful(op, arg_types, ctx):
    return UnitType()


def identity_fn():
    x = Var("x", T)
    return Function("idf", (x,), x, T)


def loop(phi_type, init_type, yield_type):
    phi = Var("acc", phi_type)
    y = Var("y", yield_type)
    return GridRegionExpr(
        Var("i", INDUCTION_TYPE), (phi,), (Var("init", init_type),), y, (y,), 4, 1, metadata=at(6)
    )


CASES = [
    # visitor-registry §4: ctx.error locates at the Call being typed
    ("op rule", lambda: Call(Strict(), (Var("a", I),), metadata=at(1)), 1),
    # a missing rule is refused at the Call that needs it
    ("missing rule", lambda: Call(NoRule(), (Var("a", T),), metadata=at(2)), 2),
    # hir §1.3: an effect-form Call in HIR is a verify error
    ("effect form", lambda: Call(Effectful(), (Var("a", T),), metadata=at(3)), 3),
    # hir §1.1: an argument that does not bind is refused at its call site
    ("binding", lambda: Call(identity_fn(), (Var("a", I),), metadata=at(4)), 4),
    # an unlocated inner error takes the nearest located enclosing Call
    (
        "nested",
        lambda: Call(Strict(), (Call(NoRule(), (Var("a", T),)),), metadata=at(5)),
        5,
    ),
    # hir §1.2: carry chain type stability
    ("phi vs init", lambda: loop(T, I, T), 6),
    ("yield vs phi", lambda: loop(T, T, I), 6),
    # hir §1.1: a body that contradicts the declared return type
    (
        "return",
        lambda: Function("f", (v := Var("x", T),), v, I, metadata=at(7)),
        7,
    ),
    # hir §1.2: loop bounds use only DimVars bound by parameters
    (
        "loop bound",
        lambda: Function(
            "f",
            (v := Var("x", T),),
            GridRegionExpr(
                Var("i", INDUCTION_TYPE), (), (), v, (), DimVar("K", 1, 9), 1, metadata=at(8)
            ),
            TupleType(()),
        ),
        8,
    ),
]


@pytest.mark.parametrize(("label", "build", "line"), CASES, ids=[c[0] for c in CASES])
def test_located_errors_end_with_file_line_col(label, build, line):
    with pytest.raises(VerifyError) as info:
        TypeInferContext().infer(build())
    assert str(info.value).endswith(f"\n  at src.py:{line}:3")
