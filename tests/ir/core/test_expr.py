"""Core Exprs: identity semantics, metadata, literal typing, Call arity, patterns."""

import numpy as np
import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import (
    BindingName,
    Call,
    Constant,
    DimVarRangePat,
    Op,
    ParamDef,
    SourceSpan,
    Tuple,
    Var,
    binding_name,
    source_span,
    with_metadata,
)
from tilefoundry.ir.types import (
    StorageKind,
    TensorType,
    bool_,
    f32,
    f64,
    i32,
    i64,
    make_tensor_type,
)

T = make_tensor_type((4,), f32)


class Two(Op):
    a = ParamDef("input")
    b = ParamDef("input")


def test_exprs_compare_and_hash_by_identity():
    x, y = Var("x", T), Var("x", T)
    assert x != y
    assert x == x
    assert len({x, y, x}) == 2


def test_metadata_is_excluded_from_repr_and_read_by_helpers():
    span = SourceSpan("m.py", 3, 5)
    x = Var("x", T, metadata=(span, BindingName("acc")))
    assert source_span(x) is span
    assert binding_name(x) == "acc"
    assert "m.py" not in repr(x)
    assert source_span(Var("y", T)) is None


def test_with_metadata_replaces_per_class_and_builds_a_new_node():
    x = Var("x", T, metadata=(SourceSpan("a.py", 1, 1),))
    y = with_metadata(x, SourceSpan("b.py", 2, 2))
    assert y is not x
    assert source_span(y).file == "b.py"
    assert len(y.metadata) == 1


def test_at_most_one_metadata_entry_per_class():
    with pytest.raises(VerifyError, match=r"two SourceSpan entries"):
        Var("x", T, metadata=(SourceSpan("a.py", 1, 1), SourceSpan("a.py", 2, 1)))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, TensorType((), i64, storage=StorageKind.UMAT)),
        (2.5, TensorType((), f32, storage=StorageKind.UMAT)),
        (True, TensorType((), bool_, storage=StorageKind.UMAT)),
        (np.int32(7), TensorType((), i32, storage=StorageKind.UMAT)),
        (np.zeros((2, 3), np.float64), TensorType((2, 3), f64, storage=StorageKind.UMAT)),
    ],
)
def test_constant_infers_its_type(value, expected):
    assert Constant(value).type == expected


def test_constant_keeps_an_explicit_type_and_freezes_arrays():
    assert Constant(1, T).type == T
    data = np.ones(4, np.float32)
    c = Constant(data)
    data[0] = 5
    assert c.value[0] == 1
    assert not c.value.flags.writeable


def test_constant_refuses_non_numbers():
    with pytest.raises(VerifyError, match=r"^Constant: value must be"):
        Constant("seven")
    with pytest.raises(VerifyError, match=r"^Constant: type must be a Type"):
        Constant(1, "f32")


def test_call_arity_counts_input_param_defs():
    x = Var("x", T)
    call = Call(Two(), [x, x])
    assert call.args == (x, x)
    assert call.type is None
    with pytest.raises(VerifyError, match=r"^Two: expected 2 argument\(s\) \('a', 'b'\), got 1"):
        Call(Two(), (x,))


def test_call_and_tuple_refuse_non_expr_operands():
    with pytest.raises(VerifyError, match=r"^Two: argument 1 must be an Expr"):
        Call(Two(), (Var("x", T), 3))
    with pytest.raises(VerifyError, match=r"^Call: target must be an Op or a Function"):
        Call("add", ())
    with pytest.raises(VerifyError, match=r"^Tuple: element 0 must be an Expr"):
        Tuple((1,))


def test_var_needs_a_name_and_a_type():
    with pytest.raises(VerifyError, match=r"must carry its type"):
        Var("x", None)
    with pytest.raises(VerifyError, match=r"non-empty string"):
        Var("", T)


def test_dim_var_range_pattern():
    pat = DimVarRangePat("S", 1, 5)
    assert pat.canonical == "S$1_5"
    assert pat.match(1) and pat.match(4) and not pat.match(5)
    with pytest.raises(VerifyError, match=r"empty range"):
        DimVarRangePat("S", 5, 5)
    with pytest.raises(VerifyError, match=r"lo must be an int"):
        DimVarRangePat("S", True, 5)
