"""Op ParamDef schema: construction checks, defaults, MRO discovery and value equality."""

from enum import Enum

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef


class Kind(Enum):
    ADD = 1
    MUL = 2


def _positive(value):
    if value <= 0:
        raise ValueError(f"must be positive, got {value}")
    return value


class Pointwise(Op):
    lhs = ParamDef("input")
    rhs = ParamDef("input")
    kind = ParamDef("attribute", Kind)


class Scaled(Pointwise):
    scale = ParamDef("attribute", int, default=1, validate=_positive)
    axes = ParamDef("attribute", tuple, default=())
    tag = ParamDef("attribute", str, optional=True)


def test_inputs_and_attributes_in_mro_then_definition_order():
    op = Scaled(kind=Kind.ADD, scale=2)
    assert Scaled.inputs() == ("lhs", "rhs")
    assert op.inputs() == ("lhs", "rhs")
    assert op.attributes() == {"kind": Kind.ADD, "scale": 2, "axes": (), "tag": None}
    assert [p.name for p in Scaled.param_defs()] == ["lhs", "rhs", "kind", "scale", "axes", "tag"]


def test_param_def_names_come_from_set_name_and_class_access_gives_the_def():
    assert isinstance(Pointwise.kind, ParamDef)
    assert Pointwise.kind.name == "kind"
    assert Pointwise(kind=Kind.MUL).kind is Kind.MUL


def test_value_equality_and_hash():
    assert Pointwise(kind=Kind.ADD) == Pointwise(kind=Kind.ADD)
    assert hash(Pointwise(kind=Kind.ADD)) == hash(Pointwise(kind=Kind.ADD))
    assert Pointwise(kind=Kind.ADD) != Pointwise(kind=Kind.MUL)
    assert Scaled(kind=Kind.ADD) != Pointwise(kind=Kind.ADD)
    assert len({Pointwise(kind=Kind.ADD), Pointwise(kind="add")}) == 1


def test_normalisations():
    assert Pointwise(kind="mul").kind is Kind.MUL
    assert Scaled(kind=Kind.ADD, axes=[0, 1]).axes == (0, 1)


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({}, r"^Pointwise: missing required attribute 'kind'"),
        (
            {"kind": Kind.ADD, "bogus": 1},
            r"^Pointwise: unknown attribute\(s\) bogus; attributes: kind",
        ),
        (
            {"kind": Kind.ADD, "lhs": 1},
            r"^Pointwise: 'lhs' is an input; pass it as a Call argument",
        ),
        ({"kind": "div"}, r"^Pointwise: attribute 'kind': unknown Kind 'div'; valid: add, mul"),
        ({"kind": 3}, r"^Pointwise: attribute 'kind' must be Kind, got int 3"),
    ],
)
def test_pointwise_construction_refusals(attrs, match):
    with pytest.raises(VerifyError, match=match):
        Pointwise(**attrs)


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"scale": 0}, r"^Scaled: attribute 'scale': must be positive, got 0"),
        ({"scale": True}, r"^Scaled: attribute 'scale' must be int, got bool True"),
        ({"axes": 3}, r"^Scaled: attribute 'axes' must be tuple"),
        ({"axes": ([1],)}, r"^Scaled: attribute 'axes': value .* is not hashable"),
    ],
)
def test_scaled_construction_refusals(attrs, match):
    with pytest.raises(VerifyError, match=match):
        Scaled(kind=Kind.ADD, **attrs)


def test_ops_are_immutable_and_inputs_are_not_attributes():
    op = Pointwise(kind=Kind.ADD)
    with pytest.raises(AttributeError, match=r"immutable"):
        op.kind = Kind.MUL
    with pytest.raises(AttributeError, match=r"is an input"):
        _ = op.lhs


def test_repr_shows_enum_names():
    assert repr(Scaled(kind=Kind.ADD)) == "Scaled(kind=ADD, scale=1, axes=(), tag=None)"


def test_malformed_schema_is_a_class_definition_error():
    with pytest.raises(TypeError, match=r"input ParamDef has no default"):
        ParamDef("input", default=1)
    with pytest.raises(TypeError, match=r"kind must be one of"):
        ParamDef("output")
