"""Binary: the kind-tagged pointwise binary op (hir §1.3 ir/hir/math, DESIGN §4.6, §4.10): its
kinds, the dtypes each kind takes, the seed's Partial table, its relation, surface names and
samples. The kernels, the StableHLO lowering and the Pallas rule of every kind live in
`binary_kernels`.

Torch broadcasting is accepted here and made explicit later by `legalize`; dtypes never promote.
The one tolerance is the compile-time scalar the authoring surface leaves behind: a Python float
arrives as a rank-0 umat f32 literal and takes the other operand's float dtype (hir §1.3 Binary,
parser §1.9); a Python int stays i64, so it must already match.
"""

from __future__ import annotations

import enum

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    broadcast_operand_shapes,
    completion_remedy,
    mesh_axis_label,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.types import DType, StorageKind, TensorType, bool_, f32, i32
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_fusion_kind,
    register_surface,
    register_typeinfer,
    register_validation_samples,
)
from tilefoundry.rules.validation_samples import (
    BOOL,
    GRID,
    POSITIVE,
    REAL,
    Sample,
    operand,
)
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
    POW = "pow"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    SHIFT_LEFT = "shift_left"
    SHIFT_RIGHT_ARITHMETIC = "shift_right_arithmetic"
    SHIFT_RIGHT_LOGICAL = "shift_right_logical"
    TRUNC_DIV = "trunc_div"
    """Integer division rounding toward zero (StableHLO's integer divide, C's /)."""
    REM = "rem"
    """The remainder of trunc_div: its sign follows the dividend (StableHLO remainder, C's fmod)."""


_COMPARISONS = frozenset(
    {BinaryKind.EQ, BinaryKind.NE, BinaryKind.LT, BinaryKind.LE, BinaryKind.GT, BinaryKind.GE}
)
_LOGICAL = frozenset({BinaryKind.AND, BinaryKind.OR})
"""Bool only: on an integer, torch's logical_and means truthiness, which bitwise_and is not."""
_BITWISE = frozenset({BinaryKind.BITWISE_AND, BinaryKind.BITWISE_OR, BinaryKind.BITWISE_XOR})
"""StableHLO's and/or/xor: integers bit by bit, bools (one bit) logically."""
SHIFTS = frozenset(
    {BinaryKind.SHIFT_LEFT, BinaryKind.SHIFT_RIGHT_ARITHMETIC, BinaryKind.SHIFT_RIGHT_LOGICAL}
)
INTEGER_DIVISIONS = frozenset(
    {BinaryKind.FLOOR_DIV, BinaryKind.MOD, BinaryKind.TRUNC_DIV, BinaryKind.REM}
)
"""The kinds whose integer form has no value for a zero divisor (an evaluation error)."""


class Binary(Op):
    """Kind-tagged pointwise binary operation; produces a Tensor."""

    lhs = ParamDef("input")
    rhs = ParamDef("input")
    kind = ParamDef("attribute", BinaryKind)


def _is_compile_time_scalar(type_: TensorType) -> bool:
    return type_.rank == 0 and type_.storage == StorageKind.UMAT


def operand_dtype(op: Binary, lhs: TensorType, rhs: TensorType) -> DType:
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
            bits = f"; bitwise_{kind.value} combines an integer's bits" if dtype.is_int else ""
            raise VerifyError(
                f"Binary: {kind.value} needs bool operands, got {dtype}; compare first "
                f"(e.g. cmp_ne(x, 0)) or cast(x, bool){bits}"
            )
    elif kind in _COMPARISONS:
        return
    elif kind in _BITWISE:
        if dtype.is_float:
            raise VerifyError(
                f"Binary: {kind.value} needs integer or bool operands, got {dtype}; HIR has no "
                "bit view of a float (cast converts the value, not its bits)"
            )
    elif dtype.is_bool:
        raise VerifyError(
            f"Binary: {kind.value} is arithmetic and bool operands have no arithmetic; use "
            "logical_and / logical_or, or cast to a numeric dtype"
        )
    elif kind == BinaryKind.DIV and not dtype.is_float:
        raise VerifyError(
            f"Binary: div is true division and the seed defines no integer div ({dtype} "
            "operands); use floor_div or trunc_div, or cast the operands to a float dtype first"
        )
    elif kind == BinaryKind.TRUNC_DIV and dtype.is_float:
        raise VerifyError(
            f"Binary: trunc_div is integer division ({dtype} operands); use div for true "
            "division or floor_div, or cast the operands to an integer dtype first"
        )
    elif kind in SHIFTS and dtype.is_float:
        raise VerifyError(
            f"Binary: {kind.value} shifts integer bits ({dtype} operands); scale a float by a "
            "power of two with mul, or cast the operands to an integer dtype first"
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
    dtype = operand_dtype(op, lhs, rhs)
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


_SURFACE_NAMES = {
    "minimum": BinaryKind.MIN,
    "maximum": BinaryKind.MAX,
    **{f"cmp_{kind.value}": kind for kind in _COMPARISONS},
    **{f"logical_{kind.value}": kind for kind in _LOGICAL},
    **{
        kind.value: kind
        for kind in BinaryKind
        if kind not in {BinaryKind.MIN, BinaryKind.MAX} | _COMPARISONS | _LOGICAL
    },
}
for _name, _kind in _SURFACE_NAMES.items():
    register_surface(_name, Binary, kind=_kind)
register_fusion_kind(Binary, FusionKind.ELEMENTWISE)


def _kind_samples(kind: BinaryKind) -> list[Sample]:
    """Values each kind is defined on (a positive divisor, a positive base, ties for
    comparisons, shift amounts of either sign); the arithmetic kinds also try an implicit
    broadcast, whose rules differ from the same-shape case."""
    op = Binary(kind=kind)
    if kind in _LOGICAL:
        bools = operand(4, 8, dtype=bool_, domain=BOOL)
        return [Sample(op, (bools, bools), kind.value)]
    if kind in _BITWISE or kind in SHIFTS or kind in INTEGER_DIVISIONS:
        domain = POSITIVE if kind in INTEGER_DIVISIONS else GRID
        rhs, row = operand(4, 8, dtype=i32, domain=domain), operand(8, dtype=i32, domain=domain)
        return [
            Sample(op, (operand(4, 8, dtype=i32), rhs), kind.value),
            Sample(op, (operand(4, 8, dtype=i32), row), f"{kind.value} (4,8)+(8)"),
        ]
    if kind in _COMPARISONS:
        grid = operand(4, 8, domain=GRID)
        return [Sample(op, (grid, grid), kind.value)]
    if kind == BinaryKind.POW:
        base, exponent = operand(4, 8, domain=POSITIVE), operand(4, 8)
        grid = operand(4, 8, dtype=i32, domain=GRID)
        return [Sample(op, (base, exponent), "pow"), Sample(op, (grid, grid), "pow i32")]
    rhs_domain = POSITIVE if kind == BinaryKind.DIV else REAL
    ci_broadcast = kind in (BinaryKind.ADD, BinaryKind.MUL, BinaryKind.MAX)
    rhs, row = operand(4, 8, domain=rhs_domain), operand(1, 8, domain=rhs_domain)
    return [
        Sample(op, (operand(4, 8), rhs), kind.value),
        Sample(op, (operand(8), rhs), f"{kind.value} (8)+(4,8)", ci_broadcast),
        Sample(op, (operand(4, 8), row), f"{kind.value} (4,8)+(1,8)", False),
    ]


def _validation_samples() -> list[Sample]:
    samples = [sample for kind in BinaryKind for sample in _kind_samples(kind)]
    float_rem = Sample(Binary(kind=BinaryKind.REM), (operand(4, 8), operand(4, 8)), "rem f32")
    return [*samples, float_rem]


register_validation_samples(Binary)(_validation_samples)
