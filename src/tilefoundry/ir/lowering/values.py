"""Tensor values for the op lowering rules that decompose into several StableHLO ops.

A rule such as Gelu or LayerNorm is a small formula; written against raw SSA names it would be a
wall of type strings. `Value` carries a name with its concrete shape and dtype, so a rule reads
like its reference kernel (`0.5 * x * (1.0 + (c * inner).unary("tanh"))`) while every step still
emits exactly one StableHLO op through `Lowering`. Python numbers become splat constants of the
other operand's type, so no implicit promotion can sneak in.

Numerics follow the reference kernels (`op_support.compute_in_f32`): a narrow float (bf16, f16,
fp8, fp4, f8e8m0) is widened to f32 once, the whole formula runs in f32, and the result is
rounded once. `widened()` / `convert()` are the two ends of that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import InternalCompilerError
from tilefoundry.ir.lowering.builder import Lowering
from tilefoundry.ir.types import DType, TensorType, bool_, f32, i64

_DIRECTIONS = {"<": "LT", "<=": "LE", ">": "GT", ">=": "GE", "==": "EQ", "!=": "NE"}


class Value:
    """One lowered tensor: its SSA name, concrete shape and dtype, and the body it lives in."""

    __slots__ = ("dtype", "lw", "name", "shape")

    def __init__(self, lw: Lowering, name: str, shape: Sequence[int], dtype: DType):
        self.lw = lw
        self.name = name
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype

    @classmethod
    def of(cls, lw: Lowering, name: str, type_: TensorType) -> Value:
        """An operand of a rule, its DimVars resolved through the emission's bindings."""
        return cls(lw, name, lw.shape(type_), type_.dtype)

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def _new(self, name: str, shape: Sequence[int] | None = None, dtype: DType | None = None):
        return Value(self.lw, name, self.shape if shape is None else shape, dtype or self.dtype)

    def _retyped(self, shape: Sequence[int], dtype: DType | None = None) -> TensorType:
        return TensorType(tuple(shape), dtype or self.dtype)

    # ---- constants --------------------------------------------------------------------------

    def full(self, value: Any, dtype: DType | None = None) -> Value:
        """A splat constant shaped like this value (of its dtype unless told otherwise)."""
        dtype = dtype or self.dtype
        return self._new(self.lw.constant(_plain(value), dtype, self.shape), dtype=dtype)

    def _operand(self, other: Value | float | int) -> Value:
        if isinstance(other, Value):
            if other.shape != self.shape or other.dtype != self.dtype:
                raise InternalCompilerError(
                    f"StableHLO lowering: operands differ ({self.type} vs {other.type}); "
                    "broadcast or convert explicitly"
                )
            return other
        return self.full(other)

    # ---- elementwise ------------------------------------------------------------------------

    def binary(self, name: str, other: Value | float | int) -> Value:
        rhs = self._operand(other)
        return self._new(self.lw.elementwise(name, (self.name, rhs.name), self.type))

    def rbinary(self, name: str, other: float | int) -> Value:
        return self.full(other).binary(name, self)

    def __add__(self, other):
        return self.binary("add", other)

    def __radd__(self, other):
        return self.rbinary("add", other)

    def __sub__(self, other):
        return self.binary("subtract", other)

    def __rsub__(self, other):
        return self.rbinary("subtract", other)

    def __mul__(self, other):
        return self.binary("multiply", other)

    def __rmul__(self, other):
        return self.rbinary("multiply", other)

    def __truediv__(self, other):
        return self.binary("divide", other)

    def __rtruediv__(self, other):
        return self.rbinary("divide", other)

    def __neg__(self):
        return self.unary("negate")

    def __and__(self, other):
        return self.binary("and", other)

    def __or__(self, other):
        return self.binary("or", other)

    def __lt__(self, other):
        return self.compare("<", other)

    def __le__(self, other):
        return self.compare("<=", other)

    def __gt__(self, other):
        return self.compare(">", other)

    def __ge__(self, other):
        return self.compare(">=", other)

    def __eq__(self, other):  # type: ignore[override]
        return self.compare("==", other)

    def __ne__(self, other):  # type: ignore[override]
        return self.compare("!=", other)

    __hash__ = None  # type: ignore[assignment]

    def maximum(self, other: Value | float | int) -> Value:
        return self.binary("maximum", other)

    def unary(self, name: str) -> Value:
        """`stablehlo.<name>` keeping the type (exponential, tanh, abs, not, ...)."""
        return self._new(self.lw.elementwise(name, (self.name,), self.type))

    def chlo_unary(self, name: str) -> Value:
        """`chlo.<name>` keeping the type, for math StableHLO has no op for (erf). CHLO ships
        with StableHLO as its set of decomposable ops: XLA and IREE take it, and the portable
        artifact is written after legalizing it (jaxlib_tools.serialize_portable), as
        jax.export does."""
        type_ = self.lw.type(self.type)
        return self._new(self.lw.op(f"chlo.{name} {self.name} : {type_} -> {type_}"))

    def is_finite(self) -> Value:
        """`stablehlo.is_finite`: a bool of this value's shape."""
        out = self._retyped(self.shape, bool_)
        return self._new(self.lw.unary_to("is_finite", self.name, self.type, out), dtype=bool_)

    def compare(self, op: str, other: Value | float | int) -> Value:
        """`op` is a Python comparison ('<', '==', ...); the compare type follows the dtype."""
        rhs = self._operand(other)
        out = self._retyped(self.shape, bool_)
        name = self.lw.compare(_DIRECTIONS[op], self.name, rhs.name, self.type, out)
        return self._new(name, dtype=bool_)

    def select(self, on_true: Value, on_false: Value) -> Value:
        """This (bool) value picks `on_true` where it holds, `on_false` elsewhere."""
        on_false = on_true._operand(on_false)
        name = self.lw.select(self.name, on_true.name, on_false.name, self.type, on_true.type)
        return on_true._new(name)

    def convert(self, dtype: DType) -> Value:
        if dtype == self.dtype:
            return self
        out = self._retyped(self.shape, dtype)
        return self._new(self.lw.convert(self.name, self.type, out), dtype=dtype)

    def widened(self) -> Value:
        """f32 for a narrow float (the kernels' compute dtype), else unchanged."""
        narrow = self.dtype.is_float and self.dtype.bits < f32.bits
        return self.convert(f32) if narrow else self

    # ---- shape ------------------------------------------------------------------------------

    def broadcast_in_dim(self, dims: Sequence[int], shape: Sequence[int]) -> Value:
        out = self._retyped(shape)
        return self._new(self.lw.broadcast_in_dim(self.name, dims, self.type, out), shape)

    def broadcast_to(self, shape: Sequence[int]) -> Value:
        """torch broadcasting made explicit: right-aligned, size-1 axes grow."""
        lead = len(shape) - self.rank
        return self.broadcast_in_dim(range(lead, len(shape)), shape)

    def reshape(self, shape: Sequence[int]) -> Value:
        return self._new(self.lw.reshape(self.name, self.type, self._retyped(shape)), shape)

    def transpose(self, perm: Sequence[int]) -> Value:
        shape = tuple(self.shape[p] for p in perm)
        return self._new(self.lw.transpose(self.name, perm, self.type, self._retyped(shape)), shape)

    def slice(
        self, starts: Sequence[int], limits: Sequence[int], strides: Sequence[int] | None = None
    ) -> Value:
        strides = tuple(strides) if strides is not None else (1,) * self.rank
        shape = tuple(
            max(0, -(-(hi - lo) // s)) for lo, hi, s in zip(starts, limits, strides, strict=True)
        )
        if shape == self.shape:
            return self
        name = self.lw.op(
            f'"stablehlo.slice"({self.name}) <{{start_indices = {_i64s(starts)}, '
            f"limit_indices = {_i64s(limits)}, strides = {_i64s(strides)}}}> : "
            f"({self.lw.type(self.type)}) -> {self.lw.type(self._retyped(shape))}"
        )
        return self._new(name, shape)

    def slice_axis(self, axis: int, start: int, limit: int) -> Value:
        starts = [0] * self.rank
        limits = list(self.shape)
        starts[axis], limits[axis] = start, limit
        return self.slice(starts, limits)

    def dynamic_slice(self, starts: Sequence[Value], sizes: Sequence[int]) -> Value:
        """The `sizes` window at runtime `starts` (rank-0 values of one integer dtype). StableHLO
        clamps each start into [0, extent - size] instead of failing."""
        operand_types = ", ".join(self.lw.type(v.type) for v in (self, *starts))
        names = ", ".join(v.name for v in (self, *starts))
        shape = tuple(int(s) for s in sizes)
        name = self.lw.op(
            f'"stablehlo.dynamic_slice"({names}) <{{slice_sizes = {_i64s(shape)}}}> : '
            f"({operand_types}) -> {self.lw.type(self._retyped(shape))}"
        )
        return self._new(name, shape)

    def dynamic_update_slice(self, update: Value, starts: Sequence[Value]) -> Value:
        """`update` written at runtime `starts` (rank-0 values of one integer dtype). StableHLO
        clamps each start into [0, extent - update extent] instead of failing."""
        operand_types = ", ".join(self.lw.type(v.type) for v in (self, update, *starts))
        names = ", ".join(v.name for v in (self, update, *starts))
        name = self.lw.op(
            f'"stablehlo.dynamic_update_slice"({names}) : ({operand_types}) -> '
            f"{self.lw.type(self.type)}"
        )
        return self._new(name)

    # ---- reductions -------------------------------------------------------------------------

    def reduce(self, dims: Sequence[int], combiner: str, init: Any) -> Value:
        """`stablehlo.reduce` with one binary combiner; `init` is typed in this value's dtype
        (DESIGN §6: `dense<0>` for integers, the least value for max)."""
        dims = sorted(dims)
        shape = tuple(e for i, e in enumerate(self.shape) if i not in dims)
        start = self.lw.constant(_plain(init), self.dtype)
        name = self.lw.reduce(self.name, start, dims, combiner, self.type, self._retyped(shape))
        return self._new(name, shape)

    def reduce_keep(self, axis: int, combiner: str, init: Any) -> Value:
        """Reduce `axis` and broadcast the result back over it (softmax / norm statistics)."""
        reduced = self.reduce([axis], combiner, init)
        kept = [i for i in range(self.rank) if i != axis]
        return reduced.broadcast_in_dim(kept, self.shape)


def concatenate(values: Sequence[Value], dim: int) -> Value:
    first = values[0]
    shape = list(first.shape)
    shape[dim] = sum(v.shape[dim] for v in values)
    if len(values) == 1:
        return first
    lw = first.lw
    name = lw.op(
        f'"stablehlo.concatenate"({", ".join(v.name for v in values)}) '
        f"<{{dimension = {dim} : i64}}> : ({', '.join(lw.type(v.type) for v in values)}) -> "
        f"{lw.type(first._retyped(shape))}"
    )
    return first._new(name, shape)


def gather(x: Value, indices: Value, axis: int, batch_dims: int = 0) -> Value:
    """`out[c.., i.., t..] = x[c.., indices[b.., i..], t..]` (the Gather op's contract) as one
    `stablehlo.gather`: each index selects a size-1 slice of `axis`, collapsed, with the leading
    `batch_dims` axes of both operands paired as batching dims. StableHLO clamps an out-of-range
    start index into the axis (the reference refuses it)."""
    n_index = indices.rank - batch_dims
    shape = (*x.shape[:axis], *indices.shape[batch_dims:], *x.shape[axis + 1 :])
    offset_dims = [*range(batch_dims, axis), *range(axis + n_index, len(shape))]
    batching = list(range(batch_dims))
    sizes = [1 if d == axis or d < batch_dims else e for d, e in enumerate(x.shape)]
    numbers = [f"offset_dims = {_list(offset_dims)}", f"collapsed_slice_dims = [{axis}]"]
    if batching:
        numbers += [
            f"operand_batching_dims = {_list(batching)}",
            f"start_indices_batching_dims = {_list(batching)}",
        ]
    numbers += [f"start_index_map = [{axis}]", f"index_vector_dim = {indices.rank}"]
    lw = x.lw
    out = x._retyped(shape)
    name = lw.op(
        f'"stablehlo.gather"({x.name}, {indices.name}) <{{dimension_numbers = '
        f"#stablehlo.gather<{', '.join(numbers)}>, indices_are_sorted = false, "
        f"slice_sizes = {_i64s(sizes)}}}> : ({lw.type(x.type)}, {lw.type(indices.type)}) -> "
        f"{lw.type(out)}"
    )
    return x._new(name, shape)


def scatter_add(x: Value, indices: Value, updates: Value, axis: int, batch_dims: int = 0) -> Value:
    """`out = x; out[c.., indices[b.., i..], t..] += updates[c.., i.., t..]` (the ScatterAdd op's
    contract, `gather`'s transpose) as one `stablehlo.scatter` with an add region: the dimension
    numbers are `gather`'s, read the other way. StableHLO skips an update whose index is out of
    range (the reference refuses it)."""
    n_index = indices.rank - batch_dims
    window = [*range(batch_dims, axis), *range(axis + n_index, updates.rank)]
    numbers = [f"update_window_dims = {_list(window)}", f"inserted_window_dims = [{axis}]"]
    if batch_dims:
        batching = _list(range(batch_dims))
        numbers += [
            f"input_batching_dims = {batching}",
            f"scatter_indices_batching_dims = {batching}",
        ]
    numbers += [f"scatter_dims_to_operand_dims = [{axis}]", f"index_vector_dim = {indices.rank}"]
    lw = x.lw
    region = lw.combiner_region(x.dtype, "add")
    types = ", ".join(lw.type(v.type) for v in (x, indices, updates))
    name = lw.op(
        f'"stablehlo.scatter"({x.name}, {indices.name}, {updates.name}) '
        f"{region} {{scatter_dimension_numbers = "
        f"#stablehlo.scatter<{', '.join(numbers)}>, indices_are_sorted = false, "
        f"unique_indices = false}} : ({types}) -> {lw.type(x.type)}"
    )
    return x._new(name)


def running(x: Value, axis: int, combiner: str, init: Any, reverse: bool = False) -> Value:
    """The running `combiner` of `x` along `axis` (a prefix scan; a suffix scan when `reverse`)
    as one `stablehlo.reduce_window`: a window spanning the axis, padded with `init` (the
    combiner's identity) before each element, or after it for `reverse`."""
    extent = x.shape[axis]
    windows = [extent if d == axis else 1 for d in range(x.rank)]
    before, after = (0, extent - 1) if reverse else (extent - 1, 0)
    padding = ", ".join("[0, 0]" if d != axis else f"[{before}, {after}]" for d in range(x.rank))
    lw = x.lw
    start = lw.constant(_plain(init), x.dtype)
    scalar = lw.type(TensorType((), x.dtype))
    name = lw.op(
        f'"stablehlo.reduce_window"({x.name}, {start}) <{{padding = dense<[{padding}]> : '
        f"tensor<{x.rank}x2xi64>, window_dimensions = {_i64s(windows)}, "
        f"window_strides = {_i64s([1] * x.rank)}}}> {lw.combiner_region(x.dtype, combiner)} : "
        f"({lw.type(x.type)}, {scalar}) -> {lw.type(x.type)}"
    )
    return x._new(name)


def iota(lw: Lowering, shape: Sequence[int], dim: int, dtype: DType = i64) -> Value:
    type_ = TensorType(tuple(shape), dtype)
    name = lw.op(f"stablehlo.iota dim = {dim} : {lw.type(type_)}")
    return Value(lw, name, shape, dtype)


def _plain(value: Any) -> Any:
    """A numpy/ml_dtypes scalar as a Python number (the literal writer takes plain numbers)."""
    if isinstance(value, np.generic):
        kind = value.dtype.kind
        return bool(value) if kind == "b" else int(value) if kind in "iu" else float(value)
    return value


def _list(values: Sequence[int]) -> str:
    return f"[{', '.join(map(str, values))}]"


def _i64s(values: Sequence[int]) -> str:
    if not values:
        return "array<i64>"
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>"
