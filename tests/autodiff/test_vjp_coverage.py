"""Every op is differentiable, declares a zero cotangent, or is refused by the transform (issue 25
item 2, DESIGN §4.18): the refused set is explicit and sorted, so adding an op without deciding
fails here, and landing a rule for a refused op fails here until the set shrinks."""

import pytest

from ir.hir.test_op_coverage import HIR_OPS
from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.types import f64, make_tensor_type
from tilefoundry.rules import VJP, ZERO_COTANGENT

REFUSED_BY_THE_TRANSFORM = [
    # a per-device value has no global value, hence no global cotangent; its transpose would
    # assemble per-device cotangents into one sharded value, which no HIR op does
    "Local",
]
"""Ops the transform refuses up front (a located UnsupportedError naming the op)."""


def test_the_refused_set_is_sorted():
    assert sorted(REFUSED_BY_THE_TRANSFORM) == REFUSED_BY_THE_TRANSFORM


@pytest.mark.parametrize("op_class", HIR_OPS, ids=lambda cls: cls.__name__)
def test_every_op_is_differentiated_declared_or_refused(op_class):
    name = op_class.__name__
    kinds = [
        kind
        for kind, present in (
            ("rule", VJP.has(op_class)),
            ("zero cotangent", ZERO_COTANGENT.has(op_class)),
            ("refused", name in REFUSED_BY_THE_TRANSFORM),
        )
        if present
    ]
    assert len(kinds) == 1, f"{name}: {kinds or 'no VJP rule, no zero cotangent, not refused'}"


def test_every_zero_cotangent_declaration_says_why():
    for op_class in ZERO_COTANGENT.registered():
        reason = ZERO_COTANGENT.lookup(op_class)()
        assert isinstance(reason, str) and reason, op_class.__name__


KINDS_WITHOUT_A_DERIVATIVE: list[str] = []
"""Binary / Unary kinds whose derivative is not written yet (refused where differentiated,
never a silent zero), sorted; a new kind lands here until its derivative does."""


def _kind_program(op, arity: int):
    """sum(op(x[, y])) over f64 operands, or None when the kind takes no f64 operands or gives
    no float result (a comparison: no cotangent flows)."""
    params = tuple(Var(n, make_tensor_type((4,), f64)) for n in "xy"[:arity])
    try:
        body = Call(op, params)
        TypeInferContext().infer(body)
    except VerifyError:
        return None
    if not body.type.dtype.is_float:
        return None
    total = tf.reduce(body, axes=(0,), keepdim=False, kind="sum")
    return Function("f", params, total, total.type)


def test_every_kind_is_differentiated_or_listed_as_refused():
    refused = []
    for kinds, op_class, arity in ((UnaryKind, Unary, 1), (BinaryKind, Binary, 2)):
        for kind in kinds:
            fn = _kind_program(op_class(kind=kind), arity)
            if fn is None:
                continue
            try:
                grad(fn)
            except UnsupportedError as err:
                assert f"kind '{kind.value}'" in err.message, err.message
                refused.append(f"{op_class.__name__}.{kind.name}")
    assert sorted(refused) == KINDS_WITHOUT_A_DERIVATIVE
