"""Unary: the kind-tagged pointwise unary op (hir §1.3 ir/hir/math).

Which pending reductions each kind carries is the seed's table, stated once in `_COMMUTES`:
monotone non-decreasing kinds commute with max/min, the linear neg with sum only (negation turns
max into min, and the seed does not map one Partial to another), and the rest with nothing.
"""

from __future__ import annotations

import enum

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    compute_in_f32,
    computes_into,
    propagate,
    refuse_partials,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import DType, TensorType, bool_
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_eval_into,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
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
    EXP2 = "exp2"
    LOG2 = "log2"


class Unary(Op):
    """Kind-tagged pointwise unary operation; produces a Tensor."""

    x = ParamDef("input")
    kind = ParamDef("attribute", UnaryKind)


_MONOTONE = frozenset(
    {
        UnaryKind.EXP,
        UnaryKind.LOG,
        UnaryKind.RELU,
        UnaryKind.CEIL,
        UnaryKind.ROUND,
        UnaryKind.EXP2,
        UnaryKind.LOG2,
    }
)

# hir §1.3 Unary: the reductions each kind provably commutes with.
_PARTIAL_DOMAIN = frozenset({UnaryKind.LOG, UnaryKind.LOG2})
"""Monotone only on their domain: a Partial(max) addend on a device that does not hold the
maximum may be <= 0, where log is NaN, and NaN wins a max (the sharding-rule validator found
this). A Partial(min) addend is never below the true minimum, so min still commutes."""

_COMMUTES: dict[UnaryKind, frozenset[str]] = {
    **{kind: frozenset({"max", "min"}) for kind in _MONOTONE - _PARTIAL_DOMAIN},
    **{kind: frozenset({"min"}) for kind in _PARTIAL_DOMAIN},
    UnaryKind.NEG: frozenset({"sum"}),
}

_FLOAT_ONLY = frozenset(
    {UnaryKind.RSQRT, UnaryKind.EXP, UnaryKind.LOG, UnaryKind.EXP2, UnaryKind.LOG2}
)
_IDENTITY_ON_INTEGERS = frozenset({UnaryKind.CEIL, UnaryKind.ROUND})


def _commutation_fact(kind: UnaryKind) -> str:
    if kind in _PARTIAL_DOMAIN:
        return (
            f"{kind.value} is monotone only on positive values and a non-maximal Partial(max) "
            "addend may be <= 0 (NaN wins a max), so it commutes with min only"
        )
    if kind in _MONOTONE:
        return f"{kind.value} is monotone non-decreasing, so it commutes with max/min only"
    if kind == UnaryKind.NEG:
        return "neg is linear but reverses order, so it commutes with sum only"
    return f"{kind.value} is not proven to commute with any reduction"


def _check_dtype(op: Unary, dtype: DType) -> None:
    kind = op.kind
    if kind == UnaryKind.NOT:
        if not dtype.is_bool:
            raise VerifyError(
                f"Unary: logical_not needs a bool operand, got {dtype}; compare first "
                "(e.g. cmp_ne(x, 0))"
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
    return TensorType(x.shape, x.dtype, layout, result_storage(op, arg_types))


@register_access_relation(Unary)
def _relation(op: Unary, arg_types):
    (x,) = tensor_operands(op, arg_types)
    return elementwise_relations(1, x.shape, (x.shape,))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


_KERNELS = {
    UnaryKind.NEG: np.negative,
    UnaryKind.ABS: np.abs,
    UnaryKind.RSQRT: _rsqrt,
    UnaryKind.NOT: np.logical_not,
    UnaryKind.RELU: _relu,
    UnaryKind.SQUARE: np.square,
    UnaryKind.EXP: np.exp,
    UnaryKind.LOG: np.log,
    UnaryKind.CEIL: np.ceil,
    UnaryKind.ROUND: np.rint,  # ties to even, as torch.round
    UnaryKind.EXP2: np.exp2,
    UnaryKind.LOG2: np.log2,
}


@register_eval(Unary)
def _eval(op: Unary, args, out_type: TensorType) -> np.ndarray:
    (x,) = (np.asarray(a) for a in args)
    if op.kind in _IDENTITY_ON_INTEGERS and x.dtype.kind in "iu":
        return x.copy()  # through a float the wide integers would lose precision
    with np.errstate(all="ignore"):
        return compute_in_f32(_KERNELS[op.kind], out_type.dtype, x)


_UFUNC_KINDS = frozenset(kind for kind, kernel in _KERNELS.items() if isinstance(kernel, np.ufunc))


@register_eval_into(Unary)
def _eval_into(op: Unary, args, out_type: TensorType, out: np.ndarray) -> np.ndarray | None:
    """`_eval` on a float operand of out's dtype, when the kind is one ufunc: written into `out`,
    it writes exactly what it would return."""
    (x,) = (np.asarray(a) for a in args)
    if op.kind not in _UFUNC_KINDS or not computes_into(out, x):
        return None
    with np.errstate(all="ignore"):
        return _KERNELS[op.kind](x, out=out)


# DESIGN §3 surface names; `relu` is nn.ReLU's, so UnaryKind.RELU has no surface spelling here.
_SURFACE_NAMES = {
    "neg": UnaryKind.NEG,
    "abs": UnaryKind.ABS,
    "rsqrt": UnaryKind.RSQRT,
    "logical_not": UnaryKind.NOT,
    "square": UnaryKind.SQUARE,
    "exp": UnaryKind.EXP,
    "log": UnaryKind.LOG,
    "ceil": UnaryKind.CEIL,
    "round": UnaryKind.ROUND,
    "exp2": UnaryKind.EXP2,
    "log2": UnaryKind.LOG2,
}
for _name, _kind in _SURFACE_NAMES.items():
    register_surface(_name, Unary, kind=_kind)
register_fusion_kind(Unary, FusionKind.ELEMENTWISE)


_POSITIVE_DOMAIN = frozenset({UnaryKind.RSQRT, UnaryKind.LOG, UnaryKind.LOG2})


@register_validation_samples(Unary)
def _validation_samples() -> list[Sample]:
    """One sample per kind, each on values inside the kind's domain."""
    samples = []
    for kind in UnaryKind:
        if kind == UnaryKind.NOT:
            x = operand(4, 8, dtype=bool_, domain=BOOL)
        else:
            x = operand(4, 8, domain=POSITIVE if kind in _POSITIVE_DOMAIN else REAL)
        samples.append(Sample(Unary(kind=kind), (x,), kind.value))
    return samples


_STABLEHLO_OPS = {
    UnaryKind.NEG: "negate",
    UnaryKind.RSQRT: "rsqrt",
    UnaryKind.NOT: "not",
    UnaryKind.EXP: "exponential",
    UnaryKind.LOG: "log",
    UnaryKind.CEIL: "ceil",
    UnaryKind.ROUND: "round_nearest_even",
}
_LN2 = float(np.log(2.0))


def _lower_kind(kind: UnaryKind, x: Value) -> Value:
    if kind == UnaryKind.ABS:
        return x if x.dtype.is_unsigned else x.unary("abs")
    if kind == UnaryKind.RELU:
        return x.maximum(0)
    if kind == UnaryKind.SQUARE:
        return x * x
    if kind == UnaryKind.EXP2:
        return x.full(2.0).binary("power", x)
    if kind == UnaryKind.LOG2:
        return x.unary("log") / _LN2
    return x.unary(_STABLEHLO_OPS[kind])


@register_stablehlo(Unary)
def _stablehlo(op: Unary, operands, arg_types, out_type, lw):
    """Narrow floats in f32 and rounded once, as the kernel; ceil/round of an integer is the
    identity (the kernel never routes integers through a float)."""
    x = Value.of(lw, operands[0], arg_types[0])
    if op.kind in _IDENTITY_ON_INTEGERS and not x.dtype.is_float:
        return x.name
    return _lower_kind(op.kind, x.widened()).convert(x.dtype).name


def _pallas_kernel(kind: UnaryKind, jnp):
    special = {
        UnaryKind.RSQRT: lambda x: 1 / jnp.sqrt(x),
        UnaryKind.RELU: lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)),
        UnaryKind.ROUND: jnp.rint,
    }
    names = {
        UnaryKind.NEG: "negative",
        UnaryKind.ABS: "abs",
        UnaryKind.NOT: "logical_not",
        UnaryKind.SQUARE: "square",
        UnaryKind.EXP: "exp",
        UnaryKind.LOG: "log",
        UnaryKind.CEIL: "ceil",
        UnaryKind.EXP2: "exp2",
        UnaryKind.LOG2: "log2",
    }
    return special.get(kind) or getattr(jnp, names[kind])


@register_pallas(Unary)
def _pallas(op: Unary, args, arg_types, out_type, kx):
    """The reference kernel in jnp: identity on integers for ceil/round, f32 for narrow floats."""
    (x,) = args
    if op.kind in _IDENTITY_ON_INTEGERS and kx.jnp.issubdtype(x.dtype, kx.jnp.integer):
        return x
    return kx.in_f32(_pallas_kernel(op.kind, kx.jnp), out_type.dtype, x)
