"""Registries are exact-class and loud; the typeinfer driver caches, stamps and locates errors."""

import pytest

from tilefoundry.analysis import TypeInferContext, typeinfer_call
from tilefoundry.errors import InternalCompilerError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Op, ParamDef, SourceSpan, Tuple, Var
from tilefoundry.ir.types import TupleType, UnitType, f32, i32, make_tensor_type
from tilefoundry.rules import TYPEINFER, Registry, register_typeinfer, registered

T = make_tensor_type((4,), f32)
SPAN = SourceSpan("prog.py", 12, 7)


class Neg(Op):
    x = ParamDef("input")


class SubNeg(Neg):
    """Inherits Neg's schema but, deliberately, not its rule."""


class SameDtype(Op):
    a = ParamDef("input")
    b = ParamDef("input")


class Effect(Op):
    x = ParamDef("input")


class Unruled(Op):
    x = ParamDef("input")


@register_typeinfer(Neg)
def _neg(op, arg_types, ctx):
    return arg_types[0]


@register_typeinfer(SameDtype)
def _same_dtype(op, arg_types, ctx):
    if arg_types[0].dtype != arg_types[1].dtype:
        ctx.error(op, f"dtypes {arg_types[0].dtype} and {arg_types[1].dtype} differ")
    return arg_types[0]


@register_typeinfer(Effect)
def _effect(op, arg_types, ctx):
    return UnitType()


def test_double_registration_raises():
    registry = Registry("demo")
    registry.register(Neg)(lambda *a: None)
    with pytest.raises(InternalCompilerError, match=r"Neg: a demo rule is already registered"):
        registry.register(Neg)(lambda *a: None)


def test_missing_rule_names_the_op_and_kind():
    with pytest.raises(UnsupportedError, match=r"^Unruled: no typeinfer rule is registered"):
        typeinfer_call(Unruled(), T)


def test_lookup_is_exact_class_not_mro():
    with pytest.raises(UnsupportedError, match=r"^SubNeg: no typeinfer rule"):
        typeinfer_call(SubNeg(), T)


def test_registered_lists_classes_per_kind():
    assert Neg in registered("typeinfer")
    assert registered(TYPEINFER) == registered("typeinfer")
    assert Neg not in registered("eval")
    with pytest.raises(InternalCompilerError, match=r"unknown rule kind"):
        registered("codegen")


def test_typeinfer_call_builds_and_types_a_call():
    assert typeinfer_call(Neg(), T) == T


def test_ctx_error_on_op_is_located_at_the_call_being_typed():
    a, b = Var("a", T), Var("b", make_tensor_type((4,), i32))
    call = Call(SameDtype(), (a, b), metadata=(SPAN,))
    with pytest.raises(VerifyError) as info:
        TypeInferContext().infer(call)
    assert info.value.message == "SameDtype: dtypes f32 and i32 differ"
    assert str(info.value).endswith("at prog.py:12:7")


def test_unlocated_rule_error_gets_the_enclosing_call_location():
    inner = Call(Unruled(), (Var("a", T),))
    outer = Call(Neg(), (inner,), metadata=(SPAN,))
    with pytest.raises(UnsupportedError) as info:
        TypeInferContext().infer(outer)
    assert str(info.value).endswith("at prog.py:12:7")


def test_effect_form_call_is_refused_in_hir():
    call = Call(Effect(), (Var("a", T),), metadata=(SPAN,))
    with pytest.raises(VerifyError, match=r"^Effect: effect-form call") as info:
        TypeInferContext().infer(call)
    assert str(info.value).endswith("at prog.py:12:7")


def test_infer_caches_per_node_and_stamps_once():
    x = Var("x", T)
    shared = Call(Neg(), (x,))
    pair = Tuple((shared, Call(Neg(), (shared,))))
    ctx = TypeInferContext()
    assert ctx.infer(pair) == TupleType((T, T))
    assert shared.type == T and pair.type == TupleType((T, T))


def test_a_deep_call_chain_does_not_exhaust_the_recursion_limit():
    node = Var("x", T)
    for _ in range(5000):
        node = Call(Neg(), (node,))
    assert TypeInferContext().infer(node) == T
