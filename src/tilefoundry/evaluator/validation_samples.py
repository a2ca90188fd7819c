"""The validator's per-op sample table: a few small operand shapes and attributes per HIR op.

Keyed by op class name, so an op added to the catalog without samples is reported as "not
sampled" rather than silently skipped; the few ops with nothing to vary say why in NOT_SAMPLED.
Extents are 4 or 8 wherever an axis may be split, so every Split state exists on a 1-axis mesh of
extent 2 or 4 and on the 2x2 mesh. Kind-tagged ops (Unary, Binary, Reduce) get one sample per kind
because each kind carries its own commutation rule. `ci=False` samples run only under `--full`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilefoundry.evaluator.validation_inputs import Domain
from tilefoundry.ir.core import Op
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.hir.nn import (
    Conv2D,
    Gelu,
    LayerNorm,
    MatMul,
    ReLU,
    RMSNorm,
    RoPE,
    Sigmoid,
    Silu,
    SoftMax,
    Tanh,
)
from tilefoundry.ir.hir.shape import ShapeCompose, ShapeExtract
from tilefoundry.ir.hir.sharding import Reshard
from tilefoundry.ir.hir.tensor import (
    BroadcastTo,
    CacheUpdate,
    Cast,
    Concat,
    Gather,
    InsertSlice,
    Rank,
    Reduce,
    ReduceKind,
    Reshape,
    ShapeOf,
    Slice,
    Stack,
    TopK,
    Transpose,
    TupleGetItem,
    Where,
)
from tilefoundry.ir.types import DType, bool_, f32, i32, i64, make_shard_tensor_type
from tilefoundry.ir.types.shard import B, Mesh, S

REAL, GRID, POSITIVE, BOOL = Domain("real"), Domain("grid"), Domain("positive"), Domain("bool")
_COMPARISONS = {
    BinaryKind.EQ,
    BinaryKind.NE,
    BinaryKind.LT,
    BinaryKind.LE,
    BinaryKind.GT,
    BinaryKind.GE,
}
STATE_SETS = ("all", "placed", "plain")


@dataclass(frozen=True)
class Operand:
    """One tensor operand. `states`: "all" (Broadcast, each Split, each Partial), "placed"
    (Broadcast and Splits: an index, whose addends would be meaningless positions) or "plain"
    (never sharded: a runtime write position)."""

    shape: tuple[int, ...]
    dtype: DType = f32
    domain: Domain = REAL
    states: str = "all"

    def __post_init__(self) -> None:
        if self.states not in STATE_SETS:
            raise ValueError(f"Operand: states must be one of {STATE_SETS}, got {self.states!r}")


@dataclass(frozen=True)
class TupleOperand:
    """A tuple-typed operand (Concat's values, TupleGetItem's value); each field varies alone."""

    fields: tuple[Operand, ...]


@dataclass(frozen=True)
class Sample:
    """One call to validate: the op (or a factory of it for a mesh, for Reshard's target) and
    its operands."""

    op: Op | Callable[[Mesh], Op]
    operands: tuple[Operand | TupleOperand, ...]
    label: str = ""
    ci: bool = True

    def op_for(self, mesh: Mesh | None) -> Op:
        return self.op if isinstance(self.op, Op) else self.op(mesh)


def _t(*shape: int, dtype: DType = f32, domain: Domain = REAL, states: str = "all") -> Operand:
    return Operand(tuple(shape), dtype, domain, states)


def _index(*shape: int, bound: int) -> Operand:
    return Operand(tuple(shape), i64, Domain("index", bound), "placed")


def _constant(value: int, dtype: DType = i64) -> Operand:
    return Operand((), dtype, Domain("constant", value), "plain")


_POSITIVE_UNARY = {UnaryKind.RSQRT, UnaryKind.LOG, UnaryKind.LOG2}


def _unary(kind: UnaryKind) -> Sample:
    if kind == UnaryKind.NOT:
        return Sample(Unary(kind=kind), (_t(4, 8, dtype=bool_, domain=BOOL),), kind.value)
    domain = POSITIVE if kind in _POSITIVE_UNARY else REAL
    return Sample(Unary(kind=kind), (_t(4, 8, domain=domain),), kind.value)


def _binary(kind: BinaryKind) -> list[Sample]:
    op = Binary(kind=kind)
    if kind in (BinaryKind.AND, BinaryKind.OR):
        bools = _t(4, 8, dtype=bool_, domain=BOOL)
        return [Sample(op, (bools, bools), kind.value)]
    if kind in (BinaryKind.FLOOR_DIV, BinaryKind.MOD):
        return [Sample(op, (_t(4, 8, dtype=i32), _t(4, 8, dtype=i32, domain=POSITIVE)), kind.value)]
    rhs_domain = POSITIVE if kind == BinaryKind.DIV else REAL
    if kind in _COMPARISONS:
        return [Sample(op, (_t(4, 8, domain=GRID), _t(4, 8, domain=GRID)), kind.value)]
    ci_broadcast = kind in (BinaryKind.ADD, BinaryKind.MUL, BinaryKind.MAX)
    return [
        Sample(op, (_t(4, 8), _t(4, 8, domain=rhs_domain)), kind.value),
        Sample(op, (_t(8), _t(4, 8, domain=rhs_domain)), f"{kind.value} (8)+(4,8)", ci_broadcast),
        Sample(op, (_t(4, 8), _t(1, 8, domain=rhs_domain)), f"{kind.value} (4,8)+(1,8)", False),
    ]


def _reduce(kind: ReduceKind) -> list[Sample]:
    return [
        Sample(Reduce(axes=(1,), keepdim=False, kind=kind), (_t(4, 8),), f"{kind.value} axis 1"),
        Sample(Reduce(axes=(0,), keepdim=True, kind=kind), (_t(4, 8),), f"{kind.value} axis 0"),
        Sample(Reduce(axes=(0, 1), keepdim=False, kind=kind), (_t(4, 8),), "all axes", False),
    ]


def _reshard_to(attrs_of: Callable[[Mesh], tuple]) -> Callable[[Mesh], Op]:
    """Reshard's target is a layout on the mesh under test, so the op is built per mesh."""

    def build(mesh: Mesh) -> Op:
        target = make_shard_tensor_type((8, 8), f32, mesh=mesh, attrs=attrs_of(mesh))
        return Reshard(layout=target.layout)

    return build


def _activation(op: Op) -> list[Sample]:
    return [Sample(op, (_t(4, 8),)), Sample(op, (_t(8, 4, 4),), "rank 3", False)]


SAMPLES: dict[str, list[Sample]] = {
    "Unary": [_unary(kind) for kind in UnaryKind],
    "Binary": [sample for kind in BinaryKind for sample in _binary(kind)],
    "ReLU": _activation(ReLU()),
    "Sigmoid": _activation(Sigmoid()),
    "Tanh": _activation(Tanh()),
    "Gelu": _activation(Gelu()),
    "Silu": _activation(Silu()),
    "MatMul": [
        Sample(MatMul(), (_t(4, 8), _t(8, 4))),
        Sample(MatMul(), (_t(4, 4, 8), _t(4, 8, 4)), "batched"),
        Sample(MatMul(), (_t(4, 4, 8), _t(8, 4)), "broadcast rhs", False),
    ],
    "Conv2D": [
        Sample(Conv2D(padding=(1, 1)), (_t(4, 4, 8, 8), _t(4, 4, 3, 3), _t(4)), "3x3 pad 1"),
        Sample(Conv2D(), (_t(4, 4, 4, 4), _t(8, 4, 1, 1), _t(8)), "1x1", False),
    ],
    "LayerNorm": [Sample(LayerNorm(), (_t(4, 8), _t(8), _t(8)))],
    "RMSNorm": [Sample(RMSNorm(), (_t(4, 8), _t(8)))],
    "RoPE": [
        Sample(RoPE(), (_t(4, 4, 8), _t(4, 4, 8), _t(8, 8), _t(8, 8), _index(4, bound=8))),
    ],
    "SoftMax": [
        Sample(SoftMax(axis=-1), (_t(4, 8),), "last axis"),
        Sample(SoftMax(axis=0), (_t(4, 8),), "axis 0", False),
    ],
    "ShapeCompose": [
        Sample(ShapeCompose(), (TupleOperand((_constant(4), _constant(8))),)),
    ],
    "ShapeExtract": [
        Sample(ShapeExtract(index=1), (Operand((4,), i64, Domain("constant", 4)),)),
    ],
    "Reshard": [
        Sample(_reshard_to(lambda mesh: (B,) * mesh.rank), (_t(8, 8),), "to Broadcast"),
        Sample(_reshard_to(lambda mesh: (S(0),) + (B,) * (mesh.rank - 1)), (_t(8, 8),), "to S0"),
        Sample(_reshard_to(lambda mesh: (B,) * (mesh.rank - 1) + (S(1),)), (_t(8, 8),), "to S1"),
    ],
    "BroadcastTo": [
        Sample(BroadcastTo(shape=(4, 8)), (_t(8),), "(8)->(4,8)"),
        Sample(BroadcastTo(shape=(4, 8)), (_t(1, 8),), "(1,8)->(4,8)"),
    ],
    "CacheUpdate": [
        Sample(
            CacheUpdate(),
            (_t(4, 8, 4, 4), _constant(2, i32), _constant(2, i32), _t(4, 2, 4, 4)),
        ),
    ],
    "Cast": [
        Sample(Cast(dtype="f16"), (_t(4, 8),), "f32->f16"),
        Sample(Cast(dtype="i32"), (_t(4, 8),), "f32->i32"),
        Sample(Cast(dtype="f32"), (_t(4, 8, dtype=i32),), "i32->f32", False),
    ],
    "Concat": [
        Sample(Concat(axis=0), (TupleOperand((_t(4, 8), _t(4, 8))),), "axis 0"),
        Sample(Concat(axis=1), (TupleOperand((_t(4, 8), _t(4, 8))),), "axis 1", False),
    ],
    "Stack": [Sample(Stack(axis=0), (TupleOperand((_t(4, 8), _t(4, 8))),))],
    "Gather": [
        Sample(Gather(axis=0), (_t(8, 4), _index(4, bound=8)), "axis 0"),
        Sample(Gather(axis=1), (_t(4, 8), _index(4, 4, bound=8)), "axis 1", False),
    ],
    "InsertSlice": [
        Sample(InsertSlice(), (_t(8, 8), _t(4, 8), TupleOperand((_constant(4), _constant(0))))),
    ],
    "Reduce": [sample for kind in ReduceKind for sample in _reduce(kind)],
    "Reshape": [
        Sample(Reshape(new_shape=(32,)), (_t(4, 8),), "flatten"),
        Sample(Reshape(new_shape=(4, 2, 4)), (_t(4, 8),), "split last"),
        Sample(Reshape(new_shape=(8, 4)), (_t(4, 8),), "regroup", False),
    ],
    "Rank": [Sample(Rank(), (_t(4, 8),))],
    "ShapeOf": [Sample(ShapeOf(), (_t(4, 8),))],
    "Slice": [
        Sample(Slice(begin=(0, 0), end=(4, 8)), (_t(8, 8),), "rows 0:4"),
        Sample(Slice(begin=(0, 0), end=(8, 8), strides=(2, 1)), (_t(8, 8),), "stride 2", False),
    ],
    "TopK": [Sample(TopK(k=2, axis=-1), (_t(4, 8),))],
    "Transpose": [
        Sample(Transpose(perm=(1, 0)), (_t(4, 8),), "2-D"),
        Sample(Transpose(perm=(2, 0, 1)), (_t(4, 4, 8),), "3-D"),
    ],
    "TupleGetItem": [
        Sample(TupleGetItem(index=0), (TupleOperand((_t(4, 8), _t(8))),), "field 0"),
        Sample(TupleGetItem(index=1), (TupleOperand((_t(4, 8), _t(8))),), "field 1", False),
    ],
    "Where": [
        Sample(Where(), (_t(4, 8, dtype=bool_, domain=BOOL), _t(4, 8), _t(4, 8))),
        Sample(Where(), (_t(8, dtype=bool_, domain=BOOL), _t(4, 8), _t(4, 8)), "cond (8)", False),
    ],
}

NOT_SAMPLED: dict[str, str] = {
    "Local": "its result is each device's own shard by definition; there is no global value to "
    "compare with the unsharded run",
    "Zeros": "it has no operand, so there is no input state to vary",
}
