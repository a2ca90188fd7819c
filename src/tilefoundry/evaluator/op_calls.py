"""One Op call on plain (off-mesh) values, with what the call site needs worked out once.

The walk runs the same call sites on every `evaluate` of a function. What a site needs besides
its argument values depends on the IR alone: its EVAL kernel (and EVAL_INTO rule), the dtype check
of its result type, whether that result is replicated (else the call runs per device), its
concrete result type when no DimVar enters it, and the shape and dtype its result is held to. An
`OpCallSite` computes these on the first run and the interpreter keeps it with the call node.

An argument the walk reads for the last time and that the evaluator alone holds (a kernel's fresh
array: not an input, a constant, a view, or a value also held by another node or a result) is
handed to the op's EVAL_INTO rule as the output, when it has the result's shape and dtype: the
intermediate's memory is reused, as numpy's temporary elision does for hand-written numpy, and
the values are the ones the EVAL rule returns, bit for bit (the rules' contract).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from tilefoundry.errors import InternalCompilerError
from tilefoundry.evaluator.dtypes import check_type_dtypes
from tilefoundry.evaluator.values import is_replicated_type
from tilefoundry.ir.core import Call, Expr
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.rules import EVAL, EVAL_INTO


def _is_static(type_: Type) -> bool:
    """Whether every extent of `type_` is an int (its concrete type is itself)."""
    if isinstance(type_, TupleType):
        return all(_is_static(f) for f in type_.fields)
    return all(isinstance(d, int) for d in type_.shape)


def expected_of(type_: Type) -> Any:
    """What a result of the concrete `type_` is held to: (shape, numpy dtype), or a tuple of
    those for a TupleType."""
    if isinstance(type_, TupleType):
        return tuple(expected_of(f) for f in type_.fields)
    return tuple(type_.shape), np.dtype(type_.dtype.to_numpy())


def checked(result: Any, expected: Any, type_: Type, where: str) -> Any:
    """A kernel's result, held to its declared shape and dtype (a mismatch is a kernel bug);
    `expected` is `expected_of(type_)`."""
    if isinstance(type_, TupleType):
        if not isinstance(result, tuple) or len(result) != len(type_.fields):
            raise InternalCompilerError(
                f"{where}: the kernel returned {type(result).__name__}, expected a "
                f"{len(type_.fields)}-tuple for {type_}"
            )
        return tuple(
            checked(r, e, t, where) for r, e, t in zip(result, expected, type_.fields, strict=True)
        )
    shape, dtype = expected
    array = result if type(result) is np.ndarray else np.asarray(result)
    if array.shape != shape or array.dtype != dtype:
        raise InternalCompilerError(
            f"{where}: the kernel returned {array.dtype}{list(array.shape)}, but the call is "
            f"typed {type_}"
        )
    return array


class OpCallSite:
    """The fixed facts of one Call of an Op (see the module docstring)."""

    __slots__ = ("donors", "expected", "into", "op", "out_type", "replicated", "static", "where")

    def __init__(self, call: Call):
        op = call.target
        self.op, self.where = op, type(op).__name__
        out_type = call.type
        if out_type is None:
            raise InternalCompilerError(f"{self.where}: the call was never typed")
        check_type_dtypes(out_type, self.where)
        self.out_type = out_type
        fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
        self.replicated = all(is_replicated_type(f) for f in fields)
        self.static = _is_static(out_type)
        self.expected = expected_of(out_type) if self.static else None
        self.into = EVAL_INTO.lookup(type(op)) if EVAL_INTO.has(type(op)) else None
        # The argument positions whose node could be the output: a tensor of the result's type.
        self.donors: tuple[int, ...] = ()
        if self.into is not None and self.static and isinstance(out_type, TensorType):
            self.donors = tuple(
                i
                for i, arg in enumerate(call.args)
                if isinstance(arg.type, TensorType)
                and tuple(arg.type.shape) == tuple(out_type.shape)
                and arg.type.dtype == out_type.dtype
            )

    def kernel(self):
        """The op's EVAL rule, looked up when it runs: an op run only on a mesh by its
        SHARDED_EVAL rule may have none, and a missing one fails closed here."""
        return EVAL.lookup(type(self.op))

    def run(self, call: Call, args: tuple, concrete: Type, dying: Mapping[Expr, int] | None) -> Any:
        """The kernel on plain values. `dying` counts, per node, the reads still to come in this
        activation, this call's included (1: this call is the last); None: unknown, so nothing
        is written over."""
        if dying is not None:
            for i in self.donors:
                if dying.get(call.args[i]) == 1 and _exclusive(args, i):
                    out = args[i]
                    if out.shape == self.expected[0] and out.dtype == self.expected[1]:
                        result = self.into(self.op, args, concrete, out)
                        if result is not None:
                            return result
                    break
        return self.kernel()(self.op, args, concrete)


def _holders(args: tuple, i: int) -> int:
    return sys.getrefcount(args[i])


def _probe_holders() -> int | None:
    """How many references `_holders` sees for an array held by exactly one dict (the walk's
    memo) and one tuple (the call's arguments); None where the interpreter counts none."""
    if not hasattr(sys, "getrefcount"):
        return None
    memo = {0: np.empty(1)}
    return _holders((memo[0],), 0)


_HOLDERS = _probe_holders()


def _exclusive(args: tuple, i: int) -> bool:
    """Whether `args[i]` is a writable array owning its memory that only the walk's memo entry
    and this call's arguments hold: no input, constant, other node, result or view sees it (a
    view holds its base). Counted the way numpy decides its own temporary elision."""
    value = args[i]
    if type(value) is not np.ndarray or value.base is not None or not value.flags.writeable:
        return False
    del value
    return _HOLDERS is not None and _holders(args, i) == _HOLDERS
