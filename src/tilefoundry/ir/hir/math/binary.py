"""Binary: the kind-tagged pointwise binary op (hir §1.3 ir/hir/math, DESIGN §4.6, §4.10).

Torch broadcasting is accepted here and made explicit later by `legalize`; dtypes never promote.
The one tolerance is the compile-time scalar the authoring surface leaves behind: a Python float
arrives as a rank-0 umat f32 literal and takes the other operand's float dtype (hir §1.3 Binary,
parser §1.9); a Python int stays i64, so it must already match.
"""

from __future__ import annotations

import enum

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    broadcast_operand_shapes,
    completion_remedy,
    compute_in_f32,
    computes_into,
    mesh_axis_label,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import DType, StorageKind, TensorType, bool_, f32, i32
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
from tilefoundry.rules.validation_samples import BOOL, GRID, POSITIVE, REAL, Sample, operand
from tilefoundry.sharding.shard_reading import pending_partials


class BinaryKind(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOOR_DIV = "floor_div"
    MOD = "mod"
    MIN = "min"
    MAX = "max"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"


_COMPARISONS = frozenset(
    {BinaryKind.EQ, BinaryKind.NE, BinaryKind.LT, BinaryKind.LE, BinaryKind.GT, BinaryKind.GE}
)
_LOGICAL = frozenset({BinaryKind.AND, BinaryKind.OR})
_INTEGER_DIVISIONS = frozenset({BinaryKind.FLOOR_DIV, BinaryKind.MOD})


class Binary(Op):
    """Kind-tagged pointwise binary operation; produces a Tensor."""

    lhs = ParamDef("input")
    rhs = ParamDef("input")
    kind = ParamDef("attribute", BinaryKind)


def _is_compile_time_scalar(type_: TensorType) -> bool:
    return type_.rank == 0 and type_.storage == StorageKind.UMAT


def _operand_dtype(op: Binary, lhs: TensorType, rhs: TensorType) -> DType:
    """The shared operand dtype, admitting only the seed's float-scalar adoption."""
    if lhs.dtype == rhs.dtype:
        return lhs.dtype
    for name, scalar, other in (("lhs", lhs, rhs), ("rhs", rhs, lhs)):
        if not _is_compile_time_scalar(scalar):
            continue
        if scalar.dtype == f32 and other.dtype.is_float:
            return other.dtype
        if scalar.dtype.is_int:
            raise VerifyError(
                f"Binary: operand '{name}' is an integer literal ({scalar.dtype}) but the other "
                f"operand is {other.dtype}; a Python integer is not given the other operand's "
                f"dtype (hir §1.3 Binary) — write a constant of dtype {other.dtype} or cast"
            )
    return same_dtype(op, (("lhs", lhs), ("rhs", rhs)))


def _check_kind_dtype(op: Binary, dtype: DType) -> None:
    kind = op.kind
    if kind in _LOGICAL:
        if not dtype.is_bool:
            raise VerifyError(
                f"Binary: {kind.value} needs bool operands, got {dtype}; compare first "
                "(e.g. cmp_ne(x, 0)) or cast(x, bool)"
            )
    elif kind in _COMPARISONS:
        return
    elif dtype.is_bool:
        raise VerifyError(
            f"Binary: {kind.value} is arithmetic and bool operands have no arithmetic; use "
            "logical_and / logical_or, or cast to a numeric dtype"
        )
    elif kind == BinaryKind.DIV and not dtype.is_float:
        raise VerifyError(
            f"Binary: div is true division and the seed defines no integer div ({dtype} "
            "operands); use floor_div, or cast the operands to a float dtype first"
        )


def _refuse_unlisted_partials(op: Binary, lhs: TensorType, rhs: TensorType) -> None:
    """The seed's Partial table (hir §1.3 Binary; DESIGN §4.6): ADD and MUL only, else reject."""
    operands = (("lhs", lhs), ("rhs", rhs))
    pending = [name for name, type_ in operands if pending_partials(type_)]
    kind = op.kind
    if not pending:
        return
    if kind == BinaryKind.ADD and len(pending) == 2:
        _refuse_double_partial_add(lhs, rhs)
    elif kind == BinaryKind.ADD:
        refuse_partials(
            op,
            operands,
            allowed=("max", "min"),
            why="add of a pending sum and a complete value is not a sum of addends "
            "(sum(x) + b != sum(x + b)); only max/min survive adding a replicated value",
        )
    elif kind == BinaryKind.MUL and len(pending) == 2:
        refuse_partials(
            op,
            (("rhs", rhs),),
            why="'lhs' carries a Partial too, and mul of two pending values is not proven to "
            "commute with any reduction",
        )
    elif kind == BinaryKind.MUL:
        refuse_partials(
            op,
            operands,
            allowed=("sum",),
            why="mul by a replicated value distributes over sum only (its sign is not "
            "provable, and a negative scale turns max into min)",
        )
    else:
        refuse_partials(
            op, operands, why=f"kind '{kind.value}' is not proven to commute with any reduction"
        )


def _refuse_double_partial_add(lhs: TensorType, rhs: TensorType) -> None:
    """ADD of two Partials: the same mesh axes, each pending a sum (max(x)+max(y) != max(x+y))."""
    named = {"lhs": lhs, "rhs": rhs}
    for name, other in (("lhs", "rhs"), ("rhs", "lhs")):
        layout, other_partials = named[name].layout, pending_partials(named[other])
        for axis, reduction in pending_partials(named[name]).items():
            if axis not in other_partials:
                fact = (
                    f"'{other}' is not Partial there; add of two Partials is proven only when "
                    "they occupy the same mesh axes"
                )
            elif reduction != "sum":
                fact = (
                    "add of two Partials commutes only when both pend a sum "
                    "(max(x) + max(y) != max(x + y))"
                )
            else:
                continue
            raise VerifyError(
                f"Binary: operand '{name}' carries Partial({reduction}) on "
                f"{mesh_axis_label(layout.mesh, axis)}, and {fact}; "
                f"{completion_remedy(name, layout, axis)}"
            )


def _out_shape(op: Binary, lhs: TensorType, rhs: TensorType) -> tuple:
    return broadcast_operand_shapes(op, (("lhs", lhs), ("rhs", rhs)))


@register_typeinfer(Binary)
def _typeinfer(op: Binary, arg_types, ctx) -> TensorType:
    lhs, rhs = tensor_operands(op, arg_types)
    dtype = _operand_dtype(op, lhs, rhs)
    _check_kind_dtype(op, dtype)
    _refuse_unlisted_partials(op, lhs, rhs)
    out_shape = _out_shape(op, lhs, rhs)
    layout = propagate(op, arg_types, out_shape)
    out_dtype = bool_ if op.kind in _COMPARISONS else dtype
    return TensorType(out_shape, out_dtype, layout, result_storage(op, arg_types))


@register_access_relation(Binary)
def _relation(op: Binary, arg_types):
    lhs, rhs = tensor_operands(op, arg_types)
    return elementwise_relations(2, _out_shape(op, lhs, rhs), (lhs.shape, rhs.shape))


_KERNELS = {
    BinaryKind.ADD: np.add,
    BinaryKind.SUB: np.subtract,
    BinaryKind.MUL: np.multiply,
    BinaryKind.DIV: np.true_divide,
    BinaryKind.FLOOR_DIV: np.floor_divide,
    BinaryKind.MOD: np.mod,
    BinaryKind.MIN: np.minimum,
    BinaryKind.MAX: np.maximum,
    BinaryKind.EQ: np.equal,
    BinaryKind.NE: np.not_equal,
    BinaryKind.LT: np.less,
    BinaryKind.LE: np.less_equal,
    BinaryKind.GT: np.greater,
    BinaryKind.GE: np.greater_equal,
    BinaryKind.AND: np.logical_and,
    BinaryKind.OR: np.logical_or,
}


def _adopt_scalar_dtype(lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Round a float literal to the other operand's dtype first, as the surface would have."""
    if lhs.dtype == rhs.dtype:
        return lhs, rhs
    if lhs.ndim == 0 and lhs.dtype == np.float32:
        return lhs.astype(rhs.dtype), rhs
    return lhs, rhs.astype(lhs.dtype)


@register_eval(Binary)
def _eval(op: Binary, args, out_type: TensorType) -> np.ndarray:
    lhs, rhs = _adopt_scalar_dtype(*(np.asarray(a) for a in args))
    integer_division = op.kind in _INTEGER_DIVISIONS and rhs.dtype.kind in "iu"
    if integer_division and np.any(np.broadcast_arrays(lhs, rhs)[1] == 0):
        raise EvalError(f"Binary: integer {op.kind.value} by zero")
    with np.errstate(all="ignore"):
        return compute_in_f32(_KERNELS[op.kind], out_type.dtype, lhs, rhs)


_ARITHMETIC = frozenset(
    {
        BinaryKind.ADD,
        BinaryKind.SUB,
        BinaryKind.MUL,
        BinaryKind.DIV,
        BinaryKind.FLOOR_DIV,
        BinaryKind.MOD,
        BinaryKind.MIN,
        BinaryKind.MAX,
    }
)


@register_eval_into(Binary)
def _eval_into(op: Binary, args, out_type: TensorType, out: np.ndarray) -> np.ndarray | None:
    """`_eval`'s float arithmetic written into `out`: on operands of out's float dtype the ufunc
    writes exactly what it would return (nothing widened, no integer division to check)."""
    if op.kind not in _ARITHMETIC:
        return None
    lhs, rhs = _adopt_scalar_dtype(*(np.asarray(a) for a in args))
    if not computes_into(out, lhs, rhs):
        return None
    with np.errstate(all="ignore"):
        return _KERNELS[op.kind](lhs, rhs, out=out)


_SURFACE_NAMES = {
    "add": BinaryKind.ADD,
    "sub": BinaryKind.SUB,
    "mul": BinaryKind.MUL,
    "div": BinaryKind.DIV,
    "floor_div": BinaryKind.FLOOR_DIV,
    "mod": BinaryKind.MOD,
    "minimum": BinaryKind.MIN,
    "maximum": BinaryKind.MAX,
    "cmp_eq": BinaryKind.EQ,
    "cmp_ne": BinaryKind.NE,
    "cmp_lt": BinaryKind.LT,
    "cmp_le": BinaryKind.LE,
    "cmp_gt": BinaryKind.GT,
    "cmp_ge": BinaryKind.GE,
    "logical_and": BinaryKind.AND,
    "logical_or": BinaryKind.OR,
}
for _name, _kind in _SURFACE_NAMES.items():
    register_surface(_name, Binary, kind=_kind)
register_fusion_kind(Binary, FusionKind.ELEMENTWISE)


def _kind_samples(kind: BinaryKind) -> list[Sample]:
    """Values each kind is defined on (a positive divisor, ties for comparisons); the arithmetic
    kinds also try the implicit broadcasts, whose rules differ from the same-shape case."""
    op = Binary(kind=kind)
    if kind in _LOGICAL:
        bools = operand(4, 8, dtype=bool_, domain=BOOL)
        return [Sample(op, (bools, bools), kind.value)]
    if kind in _INTEGER_DIVISIONS:
        divisor = operand(4, 8, dtype=i32, domain=POSITIVE)
        return [Sample(op, (operand(4, 8, dtype=i32), divisor), kind.value)]
    if kind in _COMPARISONS:
        grid = operand(4, 8, domain=GRID)
        return [Sample(op, (grid, grid), kind.value)]
    rhs_domain = POSITIVE if kind == BinaryKind.DIV else REAL
    ci_broadcast = kind in (BinaryKind.ADD, BinaryKind.MUL, BinaryKind.MAX)
    rhs, row = operand(4, 8, domain=rhs_domain), operand(1, 8, domain=rhs_domain)
    return [
        Sample(op, (operand(4, 8), rhs), kind.value),
        Sample(op, (operand(8), rhs), f"{kind.value} (8)+(4,8)", ci_broadcast),
        Sample(op, (operand(4, 8), row), f"{kind.value} (4,8)+(1,8)", False),
    ]


register_validation_samples(Binary)(
    lambda: [sample for kind in BinaryKind for sample in _kind_samples(kind)]
)


_STABLEHLO_OPS = {
    BinaryKind.ADD: "add",
    BinaryKind.SUB: "subtract",
    BinaryKind.MUL: "multiply",
    BinaryKind.DIV: "divide",
    BinaryKind.MIN: "minimum",
    BinaryKind.MAX: "maximum",
    BinaryKind.AND: "and",
    BinaryKind.OR: "or",
}
_COMPARISON_SYMBOLS = {
    BinaryKind.EQ: "==",
    BinaryKind.NE: "!=",
    BinaryKind.LT: "<",
    BinaryKind.LE: "<=",
    BinaryKind.GT: ">",
    BinaryKind.GE: ">=",
}


def _floor_division(lhs, rhs, want_quotient: bool):
    """numpy's floor_divide / mod (Python semantics) from StableHLO's truncating `divide` and
    `remainder`: step the quotient down, and the remainder over by rhs, where the truncated
    remainder's sign differs from the divisor's. Floats follow numpy's divmod: the quotient is
    (lhs - fmod) / rhs rounded to the nearest integer, and division by zero gives lhs / rhs.
    Integer division by zero is an evaluation error in the reference and undefined here."""
    remainder = lhs.binary("remainder", rhs)
    if lhs.dtype.is_unsigned:
        return lhs / rhs if want_quotient else remainder
    fixup = (remainder != 0) & ((remainder < 0) != (rhs < 0))
    if not want_quotient:
        return fixup.select(remainder + rhs, remainder)
    if not lhs.dtype.is_float:
        quotient = lhs / rhs
        return fixup.select(quotient - 1, quotient)
    exact = (lhs - remainder) / rhs
    exact = fixup.select(exact - 1.0, exact)
    floored = exact.unary("floor")
    rounded = (exact - floored > 0.5).select(floored + 1.0, floored)
    return (rhs == 0).select(lhs / rhs, rounded)


@register_stablehlo(Binary)
def _stablehlo(op: Binary, operands, arg_types, out_type, lw):
    """Implicit broadcasts become broadcast_in_dim (until `legalize` makes them explicit), the
    float literal takes the other operand's dtype, and narrow floats compute in f32, as the
    kernel does."""
    lhs_type, rhs_type = arg_types
    dtype = _operand_dtype(op, lhs_type, rhs_type)
    shape = lw.shape(out_type)
    lhs, rhs = (
        Value.of(lw, name, type_).convert(dtype).broadcast_to(shape).widened()
        for name, type_ in zip(operands, arg_types, strict=True)
    )
    kind = op.kind
    if kind in _COMPARISON_SYMBOLS:
        return lhs.compare(_COMPARISON_SYMBOLS[kind], rhs).name
    if kind in _INTEGER_DIVISIONS:
        result = _floor_division(lhs, rhs, want_quotient=kind == BinaryKind.FLOOR_DIV)
    else:
        result = lhs.binary(_STABLEHLO_OPS[kind], rhs)
    return result.convert(out_type.dtype).name


_PALLAS_KERNELS = {
    BinaryKind.ADD: "add",
    BinaryKind.SUB: "subtract",
    BinaryKind.MUL: "multiply",
    BinaryKind.DIV: "true_divide",
    BinaryKind.FLOOR_DIV: "floor_divide",
    BinaryKind.MOD: "mod",
    BinaryKind.MIN: "minimum",
    BinaryKind.MAX: "maximum",
    BinaryKind.EQ: "equal",
    BinaryKind.NE: "not_equal",
    BinaryKind.LT: "less",
    BinaryKind.LE: "less_equal",
    BinaryKind.GT: "greater",
    BinaryKind.GE: "greater_equal",
    BinaryKind.AND: "logical_and",
    BinaryKind.OR: "logical_or",
}


@register_pallas(Binary)
def _pallas(op: Binary, args, arg_types, out_type, kx):
    """The reference kernel's numpy function, spelled in jnp (same name table)."""
    lhs, rhs = args
    if lhs.dtype != rhs.dtype and getattr(lhs, "ndim", 1) == 0:
        lhs = lhs.astype(rhs.dtype)  # the reference kernel rounds a float literal first
    elif lhs.dtype != rhs.dtype and getattr(rhs, "ndim", 1) == 0:
        rhs = rhs.astype(lhs.dtype)
    return kx.in_f32(getattr(kx.jnp, _PALLAS_KERNELS[op.kind]), out_type.dtype, lhs, rhs)
