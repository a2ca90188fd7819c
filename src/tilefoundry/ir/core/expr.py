"""The core expression nodes: Var, Constant, Tuple, Call.

Exprs compare and hash by identity. HIR is SSA-as-DAG and "the same value" *is* "the same node"
(hir §1.1 SSA shape), so two structurally equal Vars are still two variables, and every walk or
cache can key on the node itself. Nodes are frozen; the one exception is the type of a Tuple or
Call, which typeinfer stamps exactly once: an op's typeinfer rule reads the Call it types (to see
literal arguments), so the Call exists before its type does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilefoundry.errors import InternalCompilerError, VerifyError
from tilefoundry.ir.core.metadata import Metadata, normalize_metadata
from tilefoundry.ir.core.op import Op
from tilefoundry.ir.types import DType, StorageKind, TensorType, bool_, f32, i64, is_type

node = dataclass(frozen=True, eq=False)


class Expr:
    """Base of every IR value; `type` is its IR type, `metadata` its non-semantic facts.

    Each node class answers its own edges, so the graph walks (`ir.core.graph`) know no node
    class: `operands()` is every value the node needs (a loop's body included: the DAG a walk
    descends), `block_operands()` the values it reads in the block it sits in (a loop's init
    values only: its body is a block of its own). A callee (a Call's Function or FusionRegion
    target) is neither: its body is its own scope.
    """

    type: Any
    metadata: tuple[Metadata, ...]

    def operands(self) -> tuple[Expr, ...]:
        return ()

    def block_operands(self) -> tuple[Expr, ...]:
        return self.operands()

    def _init_metadata(self) -> None:
        object.__setattr__(self, "metadata", normalize_metadata(self.metadata))

    def stamp_type(self, type_: Any) -> None:
        """Record the typeinfer result; a node is stamped once and never changes type after."""
        if self.type is None:
            object.__setattr__(self, "type", type_)
        elif self.type != type_:
            raise InternalCompilerError(
                f"{type(self).__name__}: already stamped {self.type}, re-stamped {type_}"
            )


def _check_expr(owner: str, role: str, value: object) -> None:
    if not isinstance(value, Expr):
        raise VerifyError(f"{owner}: {role} must be an Expr, got {value!r}")


@node
class Var(Expr):
    """A named value: a function parameter, loop induction variable or loop-carried phi."""

    name: str
    type: Any
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise VerifyError(f"Var: name must be a non-empty string, got {self.name!r}")
        if not is_type(self.type):
            raise VerifyError(f"Var {self.name}: a Var must carry its type, got {self.type!r}")
        self._init_metadata()


def _literal_type(value: object) -> TensorType:
    """The type of an unannotated literal: a Python number is a rank-0 umat scalar (spec-facts
    types §2: literals are unmaterialized), a numpy value keeps its own dtype and shape."""
    if isinstance(value, bool):
        return TensorType((), bool_, storage=StorageKind.UMAT)
    if isinstance(value, int):
        return TensorType((), i64, storage=StorageKind.UMAT)
    if isinstance(value, float):
        return TensorType((), f32, storage=StorageKind.UMAT)
    if isinstance(value, np.ndarray | np.generic):
        return TensorType(
            tuple(np.shape(value)), DType.from_numpy(value.dtype), storage=StorageKind.UMAT
        )
    raise VerifyError(
        f"Constant: value must be a Python number or a numpy scalar/array, got {value!r}"
    )


@node
class Constant(Expr):
    """A literal value; numpy arrays are copied read-only so the node stays immutable."""

    value: Any
    type: Any = None
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.value, np.ndarray):
            frozen = np.array(self.value, copy=True)
            frozen.flags.writeable = False
            object.__setattr__(self, "value", frozen)
        if self.type is None:
            object.__setattr__(self, "type", _literal_type(self.value))
        elif not is_type(self.type):
            raise VerifyError(f"Constant: type must be a Type, got {self.type!r}")
        self._init_metadata()


@node
class Tuple(Expr):
    """A tuple of values; its type is the TupleType of the element types (stamped by typeinfer)."""

    elements: tuple[Expr, ...]
    type: Any = None
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "elements", tuple(self.elements))
        for i, element in enumerate(self.elements):
            _check_expr("Tuple", f"element {i}", element)
        self._init_metadata()

    def operands(self) -> tuple[Expr, ...]:
        return self.elements

    block_operands = operands


@node
class Call(Expr):
    """Apply an Op (or a callable Expr such as a hir Function) to argument values.

    For an Op target the arity is the Op's number of input ParamDefs (a tuple-valued input such
    as Concat's is one argument that is a Tuple); a Function target's arity is checked where it is
    elaborated, so the error can name its parameters.
    """

    target: Op | Expr
    args: tuple[Expr, ...]
    type: Any = None
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        target = self.target
        if isinstance(target, Op):
            owner = type(target).__name__
            expected = target.inputs()
            if len(self.args) != len(expected):
                raise VerifyError(
                    f"{owner}: expected {len(expected)} argument(s) {expected}, "
                    f"got {len(self.args)}"
                )
        elif isinstance(target, Expr):
            owner = type(target).__name__
        else:
            raise VerifyError(f"Call: target must be an Op or a Function, got {target!r}")
        for i, arg in enumerate(self.args):
            _check_expr(owner, f"argument {i}", arg)
        self._init_metadata()

    def operands(self) -> tuple[Expr, ...]:
        return self.args

    block_operands = operands
