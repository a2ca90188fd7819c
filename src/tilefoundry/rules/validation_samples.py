"""The sharding-rule validator's sample model: the operand shapes, value domains and attributes an
op module declares so `evaluator/validate.py` can check its sharding rules against execution.

It lives here rather than in the evaluator so an op module can state its own samples (DESIGN §2:
everything about one op lives in its module) without importing the evaluator engine; the engine
reads them back through the VALIDATION_SAMPLES registry. Conventions for the samples themselves:
extents are 4 or 8 wherever an axis may be split, so every Split state exists on a 1-axis mesh of
extent 2 or 4 and on the 2x2 mesh; kind-tagged ops (Unary, Binary, Reduce) give one sample per kind
because each kind carries its own commutation rule; `ci=False` samples run only under `--full`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tilefoundry.ir.core import Op
from tilefoundry.ir.types import DType, f32, i64
from tilefoundry.ir.types.shard import Mesh

DOMAINS = ("real", "grid", "positive", "bool", "index", "constant")
STATE_SETS = ("all", "placed", "plain")


@dataclass(frozen=True)
class Domain:
    """The values an operand may hold: `real` (either sign), `grid` (small integers of either
    sign in any dtype, so comparisons see ties), `positive` (log, rsqrt), `bool`, `index`
    (integers in [0, bound)) or `constant` (every element equals `bound`: a write count). Only
    `real` and `grid` are sign-flipped on the rerun."""

    kind: str = "real"
    bound: int = 0

    def __post_init__(self) -> None:
        if self.kind not in DOMAINS:
            raise ValueError(f"Domain: unknown kind {self.kind!r}; kinds: {DOMAINS}")

    @property
    def flips(self) -> bool:
        return self.kind in ("real", "grid")


REAL, GRID, POSITIVE, BOOL = Domain("real"), Domain("grid"), Domain("positive"), Domain("bool")


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

    def slots(self) -> list[Operand]:
        """The tensor operands in order, tuple fields flattened (each varies alone)."""
        return [f for o in self.operands for f in (o.fields if hasattr(o, "fields") else (o,))]

    def nest(self, leaves: Sequence, group: Callable[[tuple], Any] = tuple) -> tuple:
        """`leaves` (one per slot) regrouped into the operand structure; `group` builds a tuple
        operand (TupleType for types, Tuple for IR values, a Python tuple for arrays)."""
        values, rest = [], list(leaves)
        for operand in self.operands:
            if hasattr(operand, "fields"):
                values.append(group(tuple(rest.pop(0) for _ in operand.fields)))
            else:
                values.append(rest.pop(0))
        return tuple(values)


def operand(*shape: int, dtype: DType = f32, domain: Domain = REAL, states: str = "all") -> Operand:
    """Shorthand for the common case, so a sample table reads as shapes."""
    return Operand(tuple(shape), dtype, domain, states)


def index_operand(*shape: int, bound: int) -> Operand:
    """Positions in [0, bound): never Partial, since addends of a position mean nothing."""
    return Operand(tuple(shape), i64, Domain("index", bound), "placed")


def constant_operand(value: int, dtype: DType = i64) -> Operand:
    """A replicated scalar holding `value` (a size or write position the op's shape depends on)."""
    return Operand((), dtype, Domain("constant", value), "plain")
