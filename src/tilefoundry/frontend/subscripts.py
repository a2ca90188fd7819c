"""Subscripts: `x[1:3, :, 0]` is one `tf.slice`, `t[0]` on a tuple value is `tf.tuple_get_item`.

hir §1.3 prefers the subscript spelling for sub-tensors. A slice keeps its axis, an int drops it
(Slice's `squeeze_axes`), `...` stands for the axes not written. A negative int counts from the
end and therefore needs a static extent. A bound that is an affine form of a loop variable is a
loop window (`frontend.windows`, DESIGN §4.14): each becomes a `tf.dynamic_slice`, and the static
entries one `tf.slice` after them. `acc[:, i] = tile` writes one loop window
(`tf.dynamic_update_slice`) and rebinds `acc`. A per-device window (a loop over one device's share
of a split axis) is a `tf.blocked_dynamic_slice` / `tf.blocked_dynamic_update_slice` and keeps its
axis, one window per device.
"""

from __future__ import annotations

import ast
from typing import Any

from tilefoundry.frontend.expressions import is_runtime
from tilefoundry.frontend.windows import LoopIndex, Window, WindowBuilder
from tilefoundry.ir.core import Expr
from tilefoundry.ir.types import TensorType, TupleType, format_dim
from tilefoundry.ir.types.shard.int_tuple import is_int


class SubscriptBuilder(WindowBuilder):
    def eval_Subscript(self, node: ast.Subscript) -> Any:
        owner = self.eval(node.value)
        if not is_runtime(owner) and not isinstance(owner, LoopIndex):
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
                    None if b is None else self.loop_index(b)
                    for b in (element.lower, element.upper, element.step)
                ]
                entries.append((element, slice(*bounds)))
            else:
                entries.append((element, self.loop_index(element)))
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

    def windows(self, node: ast.Subscript, type_: TensorType) -> tuple[list, list[Window]]:
        """The subscript's entries with each loop window taken out (its entry becomes `:`)."""
        entries, windows = [], []
        for axis, (element, value) in enumerate(self._entries(node, type_.rank)):
            window = None
            if isinstance(value, LoopIndex):
                window = self.window_of_index(element, axis, value)
            elif isinstance(value, slice) and any(
                isinstance(b, LoopIndex) for b in (value.start, value.stop, value.step)
            ):
                window = self.window_of_slice(element, axis, value.start, value.stop)
            if window is None:
                entries.append((element, value))
                continue
            window = self.per_device(window, type_)
            extent = type_.shape[axis]
            self.prove_window(window, extent if window.blocks == 1 else extent // window.blocks)
            windows.append(window)
            entries.append((element, slice(None)))
        return entries, windows

    def _slice(self, node: ast.Subscript, owner: Expr) -> Expr:
        type_ = owner.type
        if not isinstance(type_, TensorType):
            self.diag.refuse(node, f"cannot subscript a value of type {type_}")
        entries, windows = self.windows(node, type_)
        for window in windows:
            op = "dynamic_slice" if window.blocks == 1 else "blocked_dynamic_slice"
            owner = self.surface_call(
                window.node, op, [owner, window.index.var], _window_attrs(window)
            )
        type_ = owner.type
        dropped = {w.axis for w in windows if w.drop and w.blocks == 1}
        begin, end, strides, squeeze = [], [], [], []
        for axis, (element, value) in enumerate(entries):
            extent = type_.shape[axis]
            if axis in dropped:
                value = 0
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
        if windows and not squeeze and _whole(attrs, type_):
            return owner
        return self.surface_call(node, "slice", [owner], attrs)

    def write_window(self, target: ast.Subscript, value: Any) -> None:
        """`acc[:, i] = tile`: `acc` rebound to acc with its loop window replaced by `tile`."""
        if not isinstance(target.value, ast.Name):
            self.diag.refuse(
                target, "only a named tensor's window can be written", "write acc[:, i] = tile"
            )
        owner = self.eval(target.value)
        if not isinstance(owner, Expr) or not isinstance(owner.type, TensorType):
            self.diag.refuse(
                target, "only a tensor's window can be written", "write acc[:, i] = tile"
            )
        entries, windows = self.windows(target, owner.type)
        whole = all(isinstance(v, slice) and v == slice(None) for _, v in entries)
        if len(windows) != 1 or not whole:
            self.diag.refuse(
                target,
                "a subscript assignment writes exactly one loop window, every other axis whole",
                "write acc[:, i] = tile with i a loop variable (or acc[i:i + K] = tile)",
            )
        (window,) = windows
        update = self.tensor_operand(target, value, [owner])
        if window.drop and window.blocks == 1:
            shape = list(owner.type.shape)
            shape[window.axis] = 1
            update = self.surface_call(target, "reshape", [update], {"new_shape": tuple(shape)})
        attrs = _window_attrs(window)
        del attrs["size"]
        op = "dynamic_update_slice" if window.blocks == 1 else "blocked_dynamic_update_slice"
        written = self.surface_call(
            target, op, [owner, update, window.index.var], attrs, target.value.id
        )
        self.env.bind(target.value.id, written)

    def _static_bound(self, node: ast.AST, value: Any) -> Any:
        if value is None or is_int(value):
            return value
        if is_runtime(value):
            self.diag.refuse(
                node,
                "a runtime tensor cannot be a slice bound; a window start is a loop variable in "
                "an affine form (i, i + C, i * K + C)",
                "slice with compile-time ints, or with x[i:i + K] / x[:, i] in a loop",
            )
        self.diag.refuse(
            node, f"slice bound {value!r} must be a compile-time int", "use an int or None"
        )


def _window_attrs(window: Window) -> dict:
    index = window.index
    attrs = {"axis": window.axis, "size": window.size, "scale": index.scale, "offset": index.offset}
    return attrs if window.blocks == 1 else {**attrs, "blocks": window.blocks}


def _whole(attrs: dict, type_: TensorType) -> bool:
    """Whether a Slice with `attrs` would take every axis of `type_` whole."""
    for b, e, s, extent in zip(
        attrs["begin"],
        attrs["end"],
        attrs["strides"],
        type_.shape[: len(attrs["begin"])],
        strict=True,
    ):
        if b != 0 or s != 1 or e not in (None, extent):
            return False
    return True
