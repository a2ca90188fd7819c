"""Subscripts: `x[1:3, :, 0]` is one `tf.slice`, `t[0]` on a tuple value is `tf.tuple_get_item`.

hir §1.3 prefers the subscript spelling for sub-tensors. A slice keeps its axis, an int drops it
(Slice's `squeeze_axes`), `...` stands for the axes not written. Bounds must be compile-time: the
Slice op takes static windows, so a loop variable cannot index (parser §1.9's runtime-start form
needs an op with a runtime offset, which HIR does not have). A negative int counts from the end
and therefore needs a static extent.
"""

from __future__ import annotations

import ast
from typing import Any

from tilefoundry.frontend.expressions import ExpressionBuilder, is_runtime
from tilefoundry.ir.core import Expr
from tilefoundry.ir.types import TensorType, TupleType, format_dim
from tilefoundry.ir.types.shard.int_tuple import is_int


class SubscriptBuilder(ExpressionBuilder):
    def eval_Subscript(self, node: ast.Subscript) -> Any:
        owner = self.eval(node.value)
        if not is_runtime(owner):
            index = self.eval(node.slice)
            if is_runtime(index):
                self.diag.refuse(
                    node.slice,
                    "a tensor cannot index a compile-time value",
                    "index with a compile-time int",
                )
            return self.diag.static(node, lambda o, i: o[i], owner, index)
        if not isinstance(owner, Expr):
            self.diag.refuse(
                node, "a tile loop window cannot be subscripted", "slice the tensor instead"
            )
        if isinstance(owner.type, TupleType):
            return self._project(node, owner)
        return self._slice(node, owner)

    def _project(self, node: ast.Subscript, owner: Expr) -> Expr:
        index = self.eval(node.slice)
        count = len(owner.type.fields)
        if not is_int(index):
            self.diag.refuse(
                node.slice,
                f"a tuple value is indexed by a compile-time int, got {index!r}",
                f"write t[0] .. t[{count - 1}]",
            )
        if not -count <= index < count:
            self.diag.refuse(
                node.slice,
                f"index {index} is out of range for a tuple of {count} values",
                f"use 0 .. {count - 1}",
            )
        return self.surface_call(node, "tuple_get_item", [owner], {"index": index % count})

    def _entries(self, node: ast.Subscript, rank: int) -> list[tuple[ast.AST, Any]]:
        written = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        entries = []
        for element in written:
            if isinstance(element, ast.Slice):
                bounds = [
                    None if b is None else self.eval(b)
                    for b in (element.lower, element.upper, element.step)
                ]
                entries.append((element, slice(*bounds)))
            else:
                entries.append((element, self.eval(element)))
        ellipses = [i for i, (_, v) in enumerate(entries) if v is Ellipsis]
        if len(ellipses) > 1:
            self.diag.refuse(node, "a subscript holds at most one ...", "keep one ...")
        if ellipses:
            at = ellipses[0]
            fill = [(node, slice(None))] * (rank - len(entries) + 1)
            entries = entries[:at] + fill + entries[at + 1 :]
        if len(entries) > rank:
            self.diag.refuse(
                node,
                f"{len(entries)} indices for a rank-{rank} tensor",
                "give at most one index per axis",
            )
        return entries

    def _slice(self, node: ast.Subscript, owner: Expr) -> Expr:
        type_ = owner.type
        if not isinstance(type_, TensorType):
            self.diag.refuse(node, f"cannot subscript a value of type {type_}")
        begin, end, strides, squeeze = [], [], [], []
        for axis, (element, value) in enumerate(self._entries(node, type_.rank)):
            extent = type_.shape[axis]
            if isinstance(value, slice):
                for bound in (value.start, value.stop, value.step):
                    self._static_bound(element, bound)
                if is_int(extent):  # spell the window out: the printed IR shows real bounds
                    value = slice(*self.diag.static(element, value.indices, extent))
                begin.append(value.start)
                end.append(value.stop)
                strides.append(value.step)
                continue
            index = self._static_bound(element, value)
            if index is None:
                self.diag.refuse(element, "None (newaxis) is not supported", "use tf.reshape")
            if index < 0:
                if not is_int(extent):
                    self.diag.refuse(
                        element,
                        f"negative index {index} on axis {axis} of symbolic extent "
                        f"{format_dim(extent)}",
                        "index from the start, or give the axis a static extent",
                    )
                index += extent
            if is_int(extent) and not 0 <= index < extent:
                self.diag.refuse(
                    element,
                    f"index {value} is out of range for axis {axis} of extent {extent}",
                    f"use an index in [{-extent}, {extent})",
                )
            begin.append(index)
            end.append(index + 1)
            strides.append(None)
            squeeze.append(axis)
        attrs = {
            "begin": tuple(0 if b is None else b for b in begin),
            "end": tuple(end),
            "strides": tuple(1 if s is None else s for s in strides),
            "squeeze_axes": tuple(squeeze),
        }
        return self.surface_call(node, "slice", [owner], attrs)

    def _static_bound(self, node: ast.AST, value: Any) -> Any:
        if value is None or is_int(value):
            return value
        if is_runtime(value):
            self.diag.refuse(
                node,
                "a runtime value cannot be a slice bound; Slice takes static windows",
                "slice with compile-time ints (loop variables cannot index)",
            )
        self.diag.refuse(
            node, f"slice bound {value!r} must be a compile-time int", "use an int or None"
        )
