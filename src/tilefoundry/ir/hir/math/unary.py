"""Unary: the kind-tagged pointwise unary op (hir §1.3 ir/hir/math): its kinds, the dtypes each
kind takes, the pending reductions each carries, its relation, surface names and samples. The
kernels, the StableHLO lowering and the Pallas rule of every kind live in `unary_kernels`.

Which pending reductions each kind carries is the seed's table, stated once in `_COMMUTES`:
monotone non-decreasing kinds commute with max/min, the linear neg with sum only (negation turns
max into min, and the seed does not map one Partial to another), and the rest with nothing.
"""

from __future__ import annotations

import enum

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    propagate,
    refuse_partials,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.types import DType, TensorType, bool_, i32
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_fusion_kind,
    register_surface,
    register_typeinfer,
    register_validation_samples,
)
from tilefoundry.rules.validation_samples import BOOL, POSITIVE, REAL, Sample, operand


class UnaryKind(enum.Enum):
    NEG = "neg"
    ABS = "abs"
    RSQRT = "rsqrt"
    NOT = "not"
    RELU = "relu"
    SQUARE = "square"
    EXP = "exp"
    LOG = "log"
    CEIL = "ceil"
    ROUND = "round"
    """Half to even (StableHLO round_nearest_even), as torch.round and numpy.rint."""
    EXP2 = "exp2"
    LOG2 = "log2"
    SQRT = "sqrt"
    SIGN = "sign"
    EXPM1 = "expm1"
    LOG1P = "log1p"
    ERF = "erf"
    IS_FINITE = "is_finite"
    ROUND_HALF_AWAY = "round_half_away"
    """Half away from zero (StableHLO round_nearest_afz), as C's round()."""
    BITWISE_NOT = "bitwise_not"


class Unary(Op):
    """Kind-tagged pointwise unary operation; produces a Tensor."""

    x = ParamDef("input")
    kind = ParamDef("attribute", UnaryKind)


# hir §1.3 Unary: the reductions each kind provably commutes with.
_MONOTONE = frozenset(
    {
        UnaryKind.EXP,
        UnaryKind.LOG,
        UnaryKind.RELU,
        UnaryKind.CEIL,
        UnaryKind.ROUND,
        UnaryKind.EXP2,
        UnaryKind.LOG2,
        UnaryKind.SQRT,
        UnaryKind.SIGN,
        UnaryKind.EXPM1,
        UnaryKind.LOG1P,
        UnaryKind.ERF,
        UnaryKind.ROUND_HALF_AWAY,
    }
)
_DOMAINS = {
    UnaryKind.LOG: "positive values",
    UnaryKind.LOG2: "positive values",
    UnaryKind.SQRT: "non-negative values",
    UnaryKind.LOG1P: "values above -1",
}
"""Kinds monotone only on their domain: a Partial(max) addend on a device that does not hold the
maximum may lie outside it, where the kind is NaN, and NaN wins a max (the sharding-rule
validator found this for log). A Partial(min) addend is never below the true minimum, so min
still commutes."""
_PARTIAL_DOMAIN = frozenset(_DOMAINS)

_COMMUTES: dict[UnaryKind, frozenset[str]] = {
    **{kind: frozenset({"max", "min"}) for kind in _MONOTONE - _PARTIAL_DOMAIN},
    **{kind: frozenset({"min"}) for kind in _PARTIAL_DOMAIN},
    UnaryKind.NEG: frozenset({"sum"}),
}

_FLOAT_ONLY = frozenset(
    {
        UnaryKind.RSQRT,
        UnaryKind.EXP,
        UnaryKind.LOG,
        UnaryKind.EXP2,
        UnaryKind.LOG2,
        UnaryKind.SQRT,
        UnaryKind.EXPM1,
        UnaryKind.LOG1P,
        UnaryKind.ERF,
        UnaryKind.IS_FINITE,
    }
)
IDENTITY_ON_INTEGERS = frozenset({UnaryKind.CEIL, UnaryKind.ROUND, UnaryKind.ROUND_HALF_AWAY})

_NOT_MONOTONE_FACTS = {
    UnaryKind.IS_FINITE: "is_finite is not monotone (-inf and +inf both give false)",
    UnaryKind.BITWISE_NOT: "bitwise_not reverses order (~x == -1 - x) and is not linear",
}


def _commutation_fact(kind: UnaryKind) -> str:
    if kind in _PARTIAL_DOMAIN:
        return (
            f"{kind.value} is monotone only on {_DOMAINS[kind]} and a non-maximal Partial(max) "
            "addend may lie outside them (NaN wins a max), so it commutes with min only"
        )
    if kind in _MONOTONE:
        return f"{kind.value} is monotone non-decreasing, so it commutes with max/min only"
    if kind == UnaryKind.NEG:
        return "neg is linear but reverses order, so it commutes with sum only"
    if kind in _NOT_MONOTONE_FACTS:
        return f"{_NOT_MONOTONE_FACTS[kind]}, so it commutes with no reduction"
    return f"{kind.value} is not proven to commute with any reduction"


def _check_dtype(op: Unary, dtype: DType) -> None:
    kind = op.kind
    if kind == UnaryKind.NOT:
        if not dtype.is_bool:
            bits = "; bitwise_not inverts an integer's bits" if dtype.is_int else ""
            raise VerifyError(
                f"Unary: logical_not needs a bool operand, got {dtype}; compare first "
                f"(e.g. cmp_ne(x, 0)){bits}"
            )
    elif kind == UnaryKind.BITWISE_NOT:
        if dtype.is_float:
            raise VerifyError(
                f"Unary: bitwise_not needs an integer or bool operand, got {dtype}; HIR has no "
                "bit view of a float (cast converts the value, not its bits)"
            )
    elif dtype.is_bool:
        raise VerifyError(
            f"Unary: {kind.value} is arithmetic and a bool operand has no arithmetic; use "
            "logical_not, or cast to a numeric dtype"
        )
    elif kind in _FLOAT_ONLY and not dtype.is_float:
        raise VerifyError(
            f"Unary: {kind.value} needs a float operand, got {dtype}; there is no implicit "
            "promotion, insert cast(x, f32)"
        )


@register_typeinfer(Unary)
def _typeinfer(op: Unary, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    _check_dtype(op, x.dtype)
    refuse_partials(
        op, (("x", x),), allowed=_COMMUTES.get(op.kind, ()), why=_commutation_fact(op.kind)
    )
    layout = propagate(op, arg_types, x.shape)
    dtype = bool_ if op.kind == UnaryKind.IS_FINITE else x.dtype
    return TensorType(x.shape, dtype, layout, result_storage(op, arg_types))


@register_access_relation(Unary)
def _relation(op: Unary, arg_types):
    (x,) = tensor_operands(op, arg_types)
    return elementwise_relations(1, x.shape, (x.shape,))


# DESIGN §3 surface names; `relu` is nn.ReLU's, so UnaryKind.RELU has no surface spelling here.
_SURFACE_NAMES = {
    "logical_not": UnaryKind.NOT,
    **{kind.value: kind for kind in UnaryKind if kind not in (UnaryKind.NOT, UnaryKind.RELU)},
}
for _name, _kind in _SURFACE_NAMES.items():
    register_surface(_name, Unary, kind=_kind)
register_fusion_kind(Unary, FusionKind.ELEMENTWISE)


_POSITIVE_DOMAIN = _PARTIAL_DOMAIN | {UnaryKind.RSQRT}


def _kind_operand(kind: UnaryKind):
    if kind == UnaryKind.NOT:
        return operand(4, 8, dtype=bool_, domain=BOOL)
    if kind == UnaryKind.BITWISE_NOT:
        return operand(4, 8, dtype=i32)
    return operand(4, 8, domain=POSITIVE if kind in _POSITIVE_DOMAIN else REAL)


@register_validation_samples(Unary)
def _validation_samples() -> list[Sample]:
    """One sample per kind, each on values inside the kind's domain; sign also on integers,
    whose monotonicity is a separate fact."""
    samples = [Sample(Unary(kind=kind), (_kind_operand(kind),), kind.value) for kind in UnaryKind]
    samples.append(Sample(Unary(kind=UnaryKind.SIGN), (operand(4, 8, dtype=i32),), "sign i32"))
    return samples
