"""The per-function emission state that op lowering rules write into.

An op's StableHLO rule (registered in the op's own module with `register_stablehlo`) has the
signature `rule(op, operands, arg_types, out_type, lw) -> Lowered`, where `operands` are the
already-lowered SSA names of the Call's arguments (a tuple-typed value lowers to a tuple of names)
and `lw` is the `Lowering` below. The helpers here spell the common StableHLO forms once, so a
rule is usually one line; every helper returns the new SSA name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.lowering.mlir_text import dense_literal, element_type, static_shape, tensor_type
from tilefoundry.ir.types import DType, StorageKind, TensorType, Type

Lowered = str | tuple["Lowered", ...]


class Lowering:
    """One function body (or one region block) being written as StableHLO text."""

    def __init__(self, bindings: Mapping[Any, int] | None, counter: list[int], indent: int = 2):
        self.bindings = bindings
        self.lines: list[str] = []
        self._counter = counter  # shared by nested regions so SSA names stay unique per function
        self.indent = indent
        self._call: Any = None
        self._call_read = [False]  # shared with child bodies: a region's rule reads it too
        self._bindings_key: tuple | None = None

    @property
    def call(self) -> Any:
        """The Call whose op rule is running (None where the exit does not say). A rule that
        reads it (e.g. a Constant operand's value) depends on more than (op, types), so its
        lines are not replayed for another call (`lower_cached`)."""
        self._call_read[0] = True
        return self._call

    def set_call(self, call: Any) -> None:
        """Say which Call's op rule runs next on this body (what `call` then answers)."""
        self._call = call

    @property
    def call_was_read(self) -> bool:
        """Whether a rule on this body (or a child body) has read `call`."""
        return self._call_read[0]

    def bindings_key(self) -> tuple:
        """`bindings` as a hashable, order-free key (computed once per body)."""
        if self._bindings_key is None:
            items = (self.bindings or {}).items()
            self._bindings_key = tuple(sorted((str(k), v) for k, v in items))
        return self._bindings_key

    # ---- names and text -----------------------------------------------------------------------

    def fresh(self) -> str:
        self._counter[0] += 1
        return f"%{self._counter[0] - 1}"

    @property
    def names_taken(self) -> int:
        """How many fresh names the function has taken (its nested regions share the count)."""
        return self._counter[0]

    def take_names(self, count: int) -> int:
        """Take `count` fresh names at once; returns the number of the first (name `%n`)."""
        first = self._counter[0]
        self._counter[0] = first + count
        return first

    def line(self, text: str) -> None:
        self.lines.append(" " * self.indent + text)

    def op(self, text: str, results: int = 1) -> Lowered:
        """Append `%n = text` (or `%n:k = text`) and return the result name(s)."""
        name = self.fresh()
        if results == 1:
            self.line(f"{name} = {text}")
            return name
        self.line(f"{name}:{results} = {text}")
        return tuple(f"{name}#{i}" for i in range(results))

    def type(self, type_: TensorType) -> str:
        return tensor_type(type_, self.bindings)

    def shape(self, type_: TensorType) -> tuple[int, ...]:
        return static_shape(type_, self.bindings)

    def child(self, extra_indent: int = 2) -> Lowering:
        child = type(self)(self.bindings, self._counter, self.indent + extra_indent)
        child._call, child._call_read = self._call, self._call_read
        return child

    # ---- common forms ---------------------------------------------------------------------------

    def constant(self, value: Any, dtype: DType, shape: Sequence[int] = ()) -> str:
        array = np.broadcast_to(np.asarray(value), tuple(shape))
        type_ = self.type(TensorType(tuple(shape), dtype, storage=StorageKind.UMAT))
        return self.op(f"stablehlo.constant {dense_literal(array, dtype)} : {type_}")

    def elementwise(self, name: str, operands: Sequence[str], out_type: TensorType) -> str:
        """`stablehlo.<name>` over same-typed operands (the pretty one-type form)."""
        return self.op(f"stablehlo.{name} {', '.join(operands)} : {self.type(out_type)}")

    def unary_to(self, name: str, x: str, in_type: TensorType, out_type: TensorType) -> str:
        return self.op(f"stablehlo.{name} {x} : ({self.type(in_type)}) -> {self.type(out_type)}")

    def convert(self, x: str, in_type: TensorType, out_type: TensorType) -> str:
        if in_type.dtype == out_type.dtype:
            return x
        return self.unary_to("convert", x, in_type, out_type)

    def compare(
        self, direction: str, lhs: str, rhs: str, in_type: TensorType, out_type: TensorType
    ) -> str:
        dtype = in_type.dtype
        kind = (
            "FLOAT"
            if dtype.is_float
            else "UNSIGNED"
            if dtype.is_unsigned or dtype.is_bool
            else "SIGNED"
        )
        operand = self.type(in_type)
        return self.op(
            f"stablehlo.compare {direction}, {lhs}, {rhs}, {kind} : "
            f"({operand}, {operand}) -> {self.type(out_type)}"
        )

    def select(
        self, pred: str, on_true: str, on_false: str, pred_type: TensorType, out_type: TensorType
    ) -> str:
        return self.op(
            f"stablehlo.select {pred}, {on_true}, {on_false} : "
            f"{self.type(pred_type)}, {self.type(out_type)}"
        )

    def broadcast_in_dim(
        self, x: str, dims: Sequence[int], in_type: TensorType, out_type: TensorType
    ) -> str:
        if self.shape(in_type) == self.shape(out_type) and list(dims) == list(range(len(dims))):
            return x
        return self.op(
            f"stablehlo.broadcast_in_dim {x}, dims = [{', '.join(map(str, dims))}] : "
            f"({self.type(in_type)}) -> {self.type(out_type)}"
        )

    def reshape(self, x: str, in_type: TensorType, out_type: TensorType) -> str:
        if self.shape(in_type) == self.shape(out_type):
            return x
        return self.unary_to("reshape", x, in_type, out_type)

    def transpose(
        self, x: str, perm: Sequence[int], in_type: TensorType, out_type: TensorType
    ) -> str:
        if list(perm) == list(range(len(perm))):
            return x
        return self.op(
            f"stablehlo.transpose {x}, dims = [{', '.join(map(str, perm))}] : "
            f"({self.type(in_type)}) -> {self.type(out_type)}"
        )

    def reduce(
        self,
        x: str,
        init: str,
        dims: Sequence[int],
        combiner: str,
        in_type: TensorType,
        out_type: TensorType,
    ) -> str:
        """A reduce whose body is one commutative binary op (`add`, `maximum`, ...)."""
        scalar = self.type(TensorType((), in_type.dtype))
        return self.op(
            f"stablehlo.reduce({x} init: {init}) applies stablehlo.{combiner} across "
            f"dimensions = [{', '.join(map(str, dims))}] : ({self.type(in_type)}, {scalar}) -> "
            f"{self.type(out_type)}"
        )

    def combiner_region(self, dtype: DType, combiner: str) -> str:
        """The `({ ^bb0(a, b): ... })` region of a reduce-like op (all_reduce, scatter,
        reduce_window) that combines two scalars of `dtype` by `stablehlo.<combiner>`."""
        scalar = self.type(TensorType((), dtype))
        a, b = self.fresh(), self.fresh()
        inner = self.child(4)
        combined = inner.op(f"stablehlo.{combiner} {a}, {b} : {scalar}")
        inner.line(f"stablehlo.return {combined} : {scalar}")
        pad = " " * (self.indent + 2)
        return (
            f"({{\n{pad}^bb0({a}: {scalar}, {b}: {scalar}):\n" + "\n".join(inner.lines) + "\n"
            f"{' ' * self.indent}}})"
        )

    def dot_general(
        self,
        lhs: str,
        rhs: str,
        *,
        batch: tuple[Sequence[int], Sequence[int]],
        contract: tuple[Sequence[int], Sequence[int]],
        lhs_type: TensorType,
        rhs_type: TensorType,
        out_type: TensorType,
    ) -> str:
        def dims(pair: tuple[Sequence[int], Sequence[int]]) -> str:
            left, right = pair
            return f"[{', '.join(map(str, left))}] x [{', '.join(map(str, right))}]"

        batching = f"batching_dims = {dims(batch)}, " if batch[0] else ""
        return self.op(
            f"stablehlo.dot_general {lhs}, {rhs}, {batching}contracting_dims = {dims(contract)} "
            f": ({self.type(lhs_type)}, {self.type(rhs_type)}) -> {self.type(out_type)}"
        )

    def unsupported(self, op_name: str, why: str) -> UnsupportedError:
        return UnsupportedError(f"{op_name}: the StableHLO exit cannot express this: {why}")


def scalar_type_of(type_: Type) -> str:
    if not isinstance(type_, TensorType):
        raise UnsupportedError(f"StableHLO exit: {type_} is not a tensor")
    return f"tensor<{element_type(type_.dtype)}>"
