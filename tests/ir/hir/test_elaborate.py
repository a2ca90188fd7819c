"""Call typing by elaboration (hir §1.1): binding, propagation, memo identity, dedup, prototypes."""

import pytest

from support.toy_ops import Ident
from tilefoundry.analysis import TypeInferContext, typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, DimVarRangePat, Module, SourceSpan, Tuple, Var
from tilefoundry.ir.hir import ElaborationSession, Function, elaborate
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Partial, Split, make_mesh

MESH = make_mesh((2, 4), names=("x", "y"))
PLAIN = make_tensor_type((8, 16), f32)
ROW_SPLIT = make_shard_tensor_type((8, 16), f32, mesh=MESH, attrs=(Split(0), Broadcast()))
COL_SPLIT = make_shard_tensor_type((8, 16), f32, mesh=MESH, attrs=(Broadcast(), Split(1)))
PARTIAL_Y = make_shard_tensor_type((8, 16), f32, mesh=MESH, attrs=(Broadcast(), Partial("sum")))
S = DimVar("S", 1, 17)
DYN = make_tensor_type((S, 4), f32)


def unary(param_type=PLAIN, name="f"):
    x = Var("x", param_type)
    return Function(name, (x,), Call(Ident(), (x,)), param_type)


def pair():
    """`g(a, b) -> (ident(a), b)`: a tuple return made of a computed value and a parameter."""
    a, b = Var("a", PLAIN), Var("b", PLAIN)
    return Function("g", (a, b), Tuple((Call(Ident(), (a,)), b)), TupleType((PLAIN, PLAIN)))


# --- binding -------------------------------------------------------------------------------------


def test_layout_unconstrained_parameter_binds_a_sharded_argument_and_the_split_reaches_the_return():
    fn = unary()
    concrete = elaborate(fn, [ROW_SPLIT])
    assert concrete is not fn
    assert concrete.params[0].type == ROW_SPLIT
    assert concrete.return_type == ROW_SPLIT
    assert concrete.body.type == ROW_SPLIT
    assert typeinfer_call(fn, ROW_SPLIT) == ROW_SPLIT


def test_partial_state_stays_at_its_mesh_axis_through_the_body_and_into_tuple_returns():
    result = typeinfer_call(pair(), PARTIAL_Y, ROW_SPLIT)
    assert result == TupleType((PARTIAL_Y, ROW_SPLIT))
    assert result.fields[0].layout.attrs == (Broadcast(), Partial("sum"))


def test_explicit_shard_layout_parameter_demands_an_exact_match():
    fn = unary(ROW_SPLIT)
    assert typeinfer_call(fn, ROW_SPLIT) == ROW_SPLIT
    for argument in (PLAIN, COL_SPLIT):
        with pytest.raises(
            VerifyError, match=r"^Function f: parameter 'x': layout .* exact contract"
        ):
            typeinfer_call(fn, argument)


@pytest.mark.parametrize(
    ("param_type", "arg_types", "match"),
    [
        # hir §1.1 binding: arity MUST match
        (PLAIN, (PLAIN, PLAIN), r"^Function f: expected 1 argument\(s\) \(x\), got 2"),
        # hir §1.1 binding: logical shape must match for a wildcard
        (PLAIN, (make_tensor_type((8, 8), f32),), r"parameter 'x': axis 1 is 8, expected 16"),
        (
            PLAIN,
            (make_tensor_type((8,), f32),),
            r"parameter 'x': rank 1 shape \(8\) does not match",
        ),
        # hir §1.1 binding: dtype must match for a wildcard
        (PLAIN, (make_tensor_type((8, 16), i32),), r"parameter 'x': dtype i32 does not match"),
        # hir §1.1 binding: DimVar shapes keep envelope matching
        (DYN, (make_tensor_type((17, 4), f32),), r"parameter 'x': axis 0 extent 17 lies outside"),
        (DYN, (make_tensor_type((DimVar("N", 1, 9), 4), f32),), r"axis 0 is N, expected S"),
        # hir §1.1 binding: any other parameter requires exact type equality
        (TupleType((PLAIN,)), (PLAIN,), r"parameter 'x': expected .*, got"),
    ],
)
def test_binding_refusals_name_the_parameter(param_type, arg_types, match):
    x = Var("x", param_type)
    fn = Function("f", (x,), x, param_type)
    with pytest.raises(VerifyError, match=match):
        elaborate(fn, arg_types)


def test_dim_var_parameter_is_not_monomorphized():
    fn = unary(DYN)
    assert elaborate(fn, [make_tensor_type((5, 4), f32)]) is fn
    assert typeinfer_call(fn, make_tensor_type((5, 4), f32)) == DYN


# --- dedup, memo, prototypes ---------------------------------------------------------------------


def test_dedup_returns_the_callee_when_nothing_changes():
    fn = unary()
    assert elaborate(fn, [PLAIN]) is fn


def test_memo_identity_within_a_session_and_fresh_instances_across_sessions():
    fn = unary()
    with ElaborationSession():
        first = elaborate(fn, [ROW_SPLIT])
        assert elaborate(fn, [ROW_SPLIT]) is first
        assert elaborate(fn, [COL_SPLIT]) is not first
    again = elaborate(fn, [ROW_SPLIT])
    assert again is not first
    assert again.return_type == first.return_type


def test_nested_calls_in_one_top_level_elaboration_share_one_instance():
    inner = unary(name="inner")
    y = Var("y", PLAIN)
    outer = Function(
        "outer",
        (y,),
        Tuple((Call(inner, (y,)), Call(inner, (y,)))),
        TupleType((PLAIN, PLAIN)),
    )
    concrete = elaborate(outer, [ROW_SPLIT])
    first, second = concrete.body.elements
    assert first.target is second.target
    assert first.target is not inner
    assert first.target.return_type == ROW_SPLIT
    assert concrete.return_type == TupleType((ROW_SPLIT, ROW_SPLIT))


def test_reconstruction_preserves_sharing_and_types_every_node():
    x = Var("x", PLAIN)
    shared = Call(Ident(), (x,))
    fn = Function("f", (x,), Tuple((shared, shared)), TupleType((PLAIN, PLAIN)))
    concrete = elaborate(fn, [ROW_SPLIT])
    left, right = concrete.body.elements
    assert left is right and left is not shared
    assert left.args[0] is concrete.params[0]
    assert left.type == ROW_SPLIT


def test_dispatch_prototype_call_types_to_its_declared_return():
    x = Var("x", DYN)
    proto = Function("p", (x,), None, DYN)
    proto.specialize(DimVarRangePat("S", 1, 17), Call(Ident(), (x,)))
    Module("m", [proto])
    assert elaborate(proto, [make_tensor_type((3, 4), f32)]) is proto
    assert typeinfer_call(proto, make_tensor_type((3, 4), f32)) == DYN
    with pytest.raises(VerifyError, match=r"parameter 'x': axis 0 extent 20 lies outside"):
        typeinfer_call(proto, make_tensor_type((20, 4), f32))


def test_uncallable_base_is_refused():
    proto = Function("p", (Var("x", DYN),), None, DYN)
    with pytest.raises(VerifyError, match=r"has no body and no variants"):
        elaborate(proto, [DYN])


def test_body_with_a_foreign_var_is_refused():
    x, stray = Var("x", PLAIN), Var("stray", PLAIN, metadata=(SourceSpan("s.py", 2, 9),))
    fn = Function("f", (x,), Tuple((x, stray)), TupleType((PLAIN, PLAIN)))
    with pytest.raises(VerifyError, match=r"uses Var 'stray'") as info:
        elaborate(fn, [ROW_SPLIT])
    assert str(info.value).endswith("at s.py:2:9")


def test_binding_error_at_a_call_site_is_located_at_that_call():
    fn = unary()
    arg = Var("arg", make_tensor_type((8, 16), i32))
    call = Call(fn, (arg,), metadata=(SourceSpan("model.py", 30, 4),))
    with pytest.raises(VerifyError) as info:
        TypeInferContext().infer(call)
    assert str(info.value).startswith("Function f: parameter 'x': dtype i32")
    assert str(info.value).endswith("at model.py:30:4")


def test_elaborating_a_body_that_breaks_its_declared_return_is_refused():
    x = Var("x", PLAIN)
    fn = Function("f", (x,), Call(Ident(), (x,)), ROW_SPLIT)
    with pytest.raises(VerifyError, match=r"does not match the declared return type"):
        elaborate(fn, [COL_SPLIT])
