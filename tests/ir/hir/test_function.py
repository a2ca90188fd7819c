"""Function shapes, signature rules, envelope partition, authoring freeze and dispatch selection."""

import pytest

from support.toy_ops import Ident
from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Call, DimVarRangePat, Module, SourceSpan, Target, Var
from tilefoundry.ir.hir import Function, canonical_signature, select_variant
from tilefoundry.ir.types import CallableType, DimVar, f32, make_tensor_type

S = DimVar("S", 1, 17)
T_S = make_tensor_type((S, 4), f32)


def base(name="f"):
    return Function(name, (Var("x", T_S),), None, T_S)


def body_of(fn):
    return Call(Ident(), (fn.params[0],))


def normal(name="g"):
    x = Var("x", T_S)
    return Function(name, (x,), Call(Ident(), (x,)), T_S)


def with_ranges(ranges, name="f"):
    fn = base(name)
    for lo, hi in ranges:
        fn.specialize(DimVarRangePat("S", lo, hi), body_of(fn))
    return fn


# --- the three shapes ------------------------------------------------------------------------


def test_normal_function_type_is_its_callable_type():
    fn = normal()
    assert fn.type == CallableType((T_S,), T_S)
    assert not fn.is_dispatch_base


def test_dispatch_base_with_partitioning_variants_seals_in_a_module():
    fn = with_ranges([(1, 5), (5, 17)])
    module = Module("m", [fn, normal()], target=Target("cpu"))
    assert fn.sealed and all(v.sealed for v in fn.variants)
    assert module.f is fn and module["f"] is fn and module.lookup("g").name == "g"
    assert [canonical_signature(v.specializations) for v in fn.variants] == ["S$1_5", "S$5_17"]


def test_explicit_variants_are_checked_completely_at_construction():
    proto = with_ranges([(1, 5), (5, 17)])
    rebuilt = Function("f", proto.params, None, T_S, variants=proto.variants)
    assert rebuilt.sealed and rebuilt == proto


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        # hir §1.1 Structure: nesting is exactly one level
        (
            {"body": None, "specializations": (DimVarRangePat("S", 1, 5),)},
            "a variant needs a body",
        ),
        # hir §1.1 Structure: a variant carries exactly one DimVarRangePat
        (
            {"specializations": (DimVarRangePat("S", 1, 5), DimVarRangePat("S", 5, 9))},
            "exactly one DimVarRangePat, got 2",
        ),
        # hir §1.1 Structure: a real body combined with variants is invalid
        ({"variants": "self-variants"}, "has no body"),
        # hir §1.1 Function typing rules: params entries MUST be Vars
        ({"params": (3,)}, "parameter 0 must be a Var"),
        # hir §1.1 Function typing rules: body is a single Expr
        ({"body": [1, 2]}, "body must be a single Expr"),
        # hir §1.1 return_type is TensorType or TupleType
        ({"return_type": "f32"}, "return_type must be a TensorType or TupleType"),
    ],
)
def test_malformed_function_shapes(kwargs, match):
    x = Var("x", T_S)
    fields = {"params": (x,), "body": Call(Ident(), (x,)), "return_type": T_S}
    if kwargs.get("variants") == "self-variants":
        kwargs = {"variants": with_ranges([(1, 17)]).variants}
    fields.update(kwargs)
    with pytest.raises(VerifyError, match=match):
        Function("f", **fields)


# --- envelope partition and signature rules ------------------------------------------------------


@pytest.mark.parametrize(
    ("ranges", "match"),
    [
        # hir §1.1 Envelope coverage: pairwise disjoint
        ([(1, 6), (5, 17)], r"variant S in \[5, 17\) overlaps variant S in \[1, 6\) on \[5, 6\)"),
        # hir §1.1 Shape dispatch: two variants MUST have distinct canonical signatures
        ([(1, 5), (1, 5)], r"duplicate canonical signature 'S\$1_5'"),
        # hir §1.1 Function typing rules: a pattern lies within its DimVar's envelope
        ([(0, 5)], r"pattern S in \[0, 5\) lies outside the envelope \[1, 17\) of DimVar S"),
        ([(9, 18)], r"pattern S in \[9, 18\) lies outside the envelope \[1, 17\)"),
    ],
)
def test_variant_registration_refusals(ranges, match):
    with pytest.raises(VerifyError, match=match):
        with_ranges(ranges)


@pytest.mark.parametrize(
    ("ranges", "match"),
    [
        # hir §1.1 Envelope coverage: jointly complete — an interior gap
        ([(1, 5), (6, 17)], r"leave a gap \[5, 6\) between S in \[1, 5\) and S in \[6, 17\)"),
        # hir §1.1 Envelope coverage: jointly complete — short of the upper end
        ([(1, 5), (5, 12)], r"fall short of the envelope: \[12, 17\) is not covered"),
        # hir §1.1 Envelope coverage: jointly complete — short of the lower end
        ([(2, 17)], r"fall short of the envelope: \[1, 2\) is not covered"),
    ],
)
def test_incomplete_cover_is_refused_when_sealed(ranges, match):
    fn = with_ranges(ranges)
    with pytest.raises(VerifyError, match=match):
        Module("m", [fn])
    with pytest.raises(VerifyError, match=match):
        Function("f", fn.params, None, T_S, variants=fn.variants)


def test_unknown_dim_var_is_refused():
    # hir §1.1 Function typing rules: a DimVarRangePat anchors to a DimVar of an input parameter
    fn = base()
    with pytest.raises(
        VerifyError, match=r"names unknown DimVar T; the input parameters declare: S"
    ):
        fn.specialize(DimVarRangePat("T", 1, 5), body_of(fn))


def test_dim_var_only_in_the_return_is_not_reachable_from_an_input():
    # hir §1.1 Function typing rules: reachable from an input parameter
    r = DimVar("R", 1, 9)
    x = Var("x", T_S)
    ret = make_tensor_type((r,), f32)
    with pytest.raises(VerifyError, match=r"names unknown DimVar R"):
        Function("f", (x,), x, ret, specializations=(DimVarRangePat("R", 1, 9),))


def test_same_name_dim_var_bounds_must_agree_across_params_and_return():
    # hir §1.1 Function typing rules: same-name DimVars agree on (lo, hi)
    x = Var("x", T_S)
    ret = make_tensor_type((DimVar("S", 1, 9), 4), f32)
    with pytest.raises(
        VerifyError,
        match=r"DimVar S has envelope \[1, 17\) in parameter 'x' but \[1, 9\) in the return type",
    ):
        Function("f", (x,), x, ret)
    y = Var("y", make_tensor_type((DimVar("S", 2, 17),), f32))
    with pytest.raises(VerifyError, match=r"in parameter 'x' but \[2, 17\) in parameter 'y'"):
        Function("f", (x, y), x, T_S)


def test_variants_of_one_base_dispatch_on_one_dim_var():
    two = Var("x", make_tensor_type((S, DimVar("N", 1, 9)), f32))
    fn = Function("f", (two,), None, two.type)
    fn.specialize(DimVarRangePat("S", 1, 17), Call(Ident(), (two,)))
    with pytest.raises(VerifyError, match=r"variants dispatch on different DimVars"):
        fn.specialize(DimVarRangePat("N", 1, 9), Call(Ident(), (two,)))


def test_a_variant_shares_the_base_signature():
    # hir §1.1 Shape dispatch: every variant shares the base's name, params and return_type
    fn = base()
    other = Var("y", T_S)
    stranger = Function(
        "f", (other,), Call(Ident(), (other,)), T_S, specializations=(DimVarRangePat("S", 1, 17),)
    )
    with pytest.raises(VerifyError, match=r"must share the base's name, parameters"):
        fn.add_variant(stranger)


# --- authoring freeze and Module sealing ---------------------------------------------------------


def test_sealed_base_refuses_more_variants():
    # hir §1.1 Authoring freeze: a sealed base rejects further variants
    fn = with_ranges([(1, 17)])
    Module("m", [fn])
    with pytest.raises(VerifyError, match=r"sealed .* no more variants"):
        fn.specialize(DimVarRangePat("S", 1, 2), body_of(fn))


def test_unsealed_base_cannot_be_hashed():
    # hir §1.1 Authoring freeze: a base MUST NOT be hashed while accumulating variants
    fn = with_ranges([(1, 17)])
    with pytest.raises(VerifyError, match=r"cannot be hashed while it still accumulates"):
        hash(fn)
    Module("m", [fn])
    assert hash(fn) == hash(fn)


def test_normal_function_takes_no_variants():
    fn = normal()
    with pytest.raises(VerifyError, match=r"has a body; only a dispatch prototype takes variants"):
        fn.add_variant(with_ranges([(1, 17)]).variants[0])


@pytest.mark.parametrize(
    ("functions", "match"),
    [
        # hir §1.1 Authoring freeze: a top-level Module.functions entry MUST NOT be a variant
        (lambda: [with_ranges([(1, 17)]).variants[0]], "function 'f' is a variant"),
        # hir §1.1 Structure: body None with no variants is uncallable
        (lambda: [base()], "has no body and no variants"),
        # core-ir §1: function names are unique in a Module
        (lambda: [normal("g"), normal("g")], "two functions are named 'g'"),
    ],
)
def test_module_refusals(functions, match):
    with pytest.raises(VerifyError, match=match):
        Module("m", functions())


def test_module_target_and_lookup_errors():
    with pytest.raises(VerifyError, match=r"target must be a Target"):
        Module("m", [normal()], target="cpu")
    module = Module("m", [normal()])
    with pytest.raises(VerifyError, match=r"no function 'h'; functions: g"):
        module["h"]
    with pytest.raises(AttributeError, match=r"no function 'h'"):
        _ = module.h


def test_label_is_not_part_of_equality_or_hash():
    x = Var("x", T_S)
    body = Call(Ident(), (x,))
    pat = (DimVarRangePat("S", 1, 17),)
    small = Function("f", (x,), body, T_S, specializations=pat, label="small")
    other = Function("f", (x,), body, T_S, specializations=pat, label="other")
    assert small == other and hash(small) == hash(other)
    assert small.label == "small"


def test_function_typeinfer_rule_checks_the_body_against_the_return_type():
    x = Var("x", T_S)
    fn = Function("f", (x,), x, make_tensor_type((S, 5), f32), metadata=(SourceSpan("k.py", 4, 1),))
    with pytest.raises(VerifyError, match=r"does not match the declared return type") as info:
        TypeInferContext().infer(fn)
    assert str(info.value).endswith("at k.py:4:1")
    assert TypeInferContext().infer(normal()) == CallableType((T_S,), T_S)


# --- dispatch resolution -------------------------------------------------------------------------


def test_select_variant_by_shape_or_binding():
    fn = with_ranges([(1, 5), (5, 17)])
    Module("m", [fn])
    assert select_variant(fn, [(4, 4)]) is fn.variants[0]
    assert select_variant(fn, [(5, 4)]) is fn.variants[1]
    assert select_variant(fn, bindings={"S": 16}) is fn.variants[1]


@pytest.mark.parametrize(
    ("shapes", "bindings", "match"),
    [
        # hir §1.1 Dispatch resolution: a shape outside the envelope matches no variant
        ([(17, 4)], None, r"S=17 lies outside the dispatch envelope \[1, 17\)"),
        (None, {"S": 0}, r"S=0 lies outside"),
        (None, {}, "DimVar S is unbound"),
        ([], None, "expected 1 argument shapes, got 0"),
        ([(4,)], None, "parameter 'x' has rank 2"),
    ],
)
def test_select_variant_refusals(shapes, bindings, match):
    fn = with_ranges([(1, 5), (5, 17)])
    with pytest.raises(EvalError, match=match):
        select_variant(fn, shapes, bindings=bindings)
