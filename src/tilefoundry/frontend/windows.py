"""Loop windows in subscripts: `x[:, i]`, `x[i:i + K]`, `x[i * K:(i + 1) * K]` (DESIGN §4.14).

parser §1.7: a `tile(extent, step)` loop variable is the window `[i, i + step)`, so `x[:, i]`
reads that window (and `i + C` moves it by a compile-time C). parser §1.9: under `range`, a
runtime start needs a compile-time size, `start:start + K`. A subscript bound is therefore read
as an affine form `scale * i + offset` of one induction variable (`LoopIndex`); the window's size
is the difference of the two bounds, which must be a compile-time int. `C - i` (a window moving
backwards) is refused, as the parser facts say.

The frontend knows each loop's domain, so it proves a window in range when the loop bounds and
the axis extent are static and refuses one that leaves the axis at its first or last iteration.
A window it cannot prove (symbolic bounds) is clamped at run time, DynamicSlice's one documented
behaviour shared by the simulator and the exits.

A window of a split axis whose loop walks exactly one device's share of it is each device's own
(`per_device`, issue 29): the loop over local experts that expert parallelism is written with.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from math import prod
from typing import Any

from tilefoundry.frontend.expressions import ExpressionBuilder
from tilefoundry.frontend.tile_window import TileWindow
from tilefoundry.ir.core import Var
from tilefoundry.ir.hir.op_support import split_owners
from tilefoundry.ir.types import TensorType, format_dim
from tilefoundry.ir.types.shard import ShardLayout
from tilefoundry.ir.types.shard.int_tuple import is_int


@dataclass(frozen=True)
class LoopIndex:
    """`scale * var + offset` for a loop induction `var`; `tile` is the window size when the
    value is a tile(...) loop variable (possibly moved by a constant), else None."""

    var: Var
    scale: int = 1
    offset: int = 0
    tile: Any = None


@dataclass(frozen=True)
class Window:
    """One windowed axis of a subscript: `size` elements from `index`; `drop` for `x[i]`.
    `blocks` > 1: a per-device window, taken in each of that many blocks (see `per_device`)."""

    axis: int
    index: LoopIndex
    size: int
    drop: bool
    node: ast.AST
    blocks: int = 1


class WindowBuilder(ExpressionBuilder):
    """Reads subscript bounds as affine forms of loop variables."""

    def loop_index(self, node: ast.AST) -> Any:
        """A LoopIndex when `node` is affine in one loop variable, else its ordinary value."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
            lhs, rhs = self.loop_index(node.left), self.loop_index(node.right)
            combined = _combine(type(node.op), lhs, rhs)
            if combined is not None:
                return combined
            if isinstance(node.op, ast.Sub) and isinstance(rhs, LoopIndex):
                self.diag.refuse(
                    node,
                    "a window start that decreases with the loop variable is not supported",
                    "write the start as i * K + C with a positive compile-time K",
                )
        value = self.eval(node)
        if isinstance(value, TileWindow):
            return LoopIndex(value.start, tile=value.size)
        if isinstance(value, Var) and value in self.loop_domains:
            return LoopIndex(value)
        return value

    def window_of_slice(self, element: ast.Slice, axis: int, lower: Any, upper: Any) -> Window:
        if element.step is not None:
            step = self.eval(element.step)
            if step != 1:
                self.diag.refuse(
                    element.step,
                    f"a loop window has step {step!r}",
                    "read a contiguous window (step 1) and slice it afterwards",
                )
        same = (
            isinstance(lower, LoopIndex)
            and isinstance(upper, LoopIndex)
            and lower.var is upper.var
            and lower.scale == upper.scale
        )
        if not same:
            self.diag.refuse(
                element,
                "the window size is not a compile-time constant: its bounds must be the same "
                "loop form start:start + K",
                "write x[i:i + K] or x[i * K:(i + 1) * K] with a compile-time int K",
            )
        size = upper.offset - lower.offset
        return Window(axis, replace(lower, tile=None), size, False, element)

    def window_of_index(self, element: ast.AST, axis: int, index: LoopIndex) -> Window:
        if index.tile is None:
            return Window(axis, index, 1, True, element)
        if not is_int(index.tile):
            self.diag.refuse(
                element,
                f"the window size {format_dim(index.tile)} (the tile step) is not a compile-time "
                "constant",
                "give tile(...) a compile-time int step",
            )
        return Window(axis, index, index.tile, False, element)

    def per_device(self, window: Window, type_: TensorType) -> Window:
        """The window as each device's own when its axis is split and the loop walks exactly
        one device's share of it (expert parallelism: `for e in range(E_LOCAL): w[e]` over
        experts split on `ep`): its windows start at 0 and tile the local extent. It is then
        taken in each of the `n` blocks the `n` devices splitting the axis hold (ops
        BlockedDynamicSlice / BlockedDynamicUpdateSlice), so the axis stays, `n * size` long.
        Any other window of a split axis stays a plain one, which typeinfer refuses."""
        layout = type_.layout
        if not isinstance(layout, ShardLayout):
            return window
        mesh_axes = [
            m for m, (axis, _, _) in split_owners("subscript", type_).items() if axis == window.axis
        ]
        extent = type_.shape[window.axis]
        devices = prod(int(layout.mesh.axes[m].size) for m in mesh_axes)
        if not mesh_axes or not is_int(extent) or extent % devices:
            return window
        start, stop, step = self.loop_domains.get(window.index.var, (None, None, None))
        if not (is_int(start) and is_int(stop) and is_int(step)) or stop <= start:
            return window
        index, local = window.index, extent // devices
        last = start + step * ((stop - start - 1) // step)
        tiles = (
            index.scale * start + index.offset == 0
            and index.scale * step == window.size
            and index.scale * last + index.offset + window.size == local
        )
        return replace(window, blocks=devices) if tiles else window

    def prove_window(self, window: Window, extent: Any) -> None:
        """Refuse a window that provably leaves its axis on the loop's first or last iteration."""
        if window.size <= 0:
            self.diag.refuse(
                window.node,
                f"the window holds {window.size} elements",
                "write start:start + K with a positive K",
            )
        if window.index.scale <= 0:
            self.diag.refuse(
                window.node,
                "a window start must move forward with the loop variable",
                "write the start as i * K + C with a positive compile-time K",
            )
        if is_int(extent) and window.size > extent:
            self.diag.refuse(
                window.node,
                f"the window of {window.size} elements is wider than axis {window.axis} of "
                f"extent {extent}",
                "use a window (tile step) of at most the axis extent",
            )
        start, stop, step = self.loop_domains.get(window.index.var, (None, None, None))
        if not (is_int(start) and is_int(stop) and is_int(step) and is_int(extent)):
            return
        if stop <= start:
            return
        last = start + step * ((stop - start - 1) // step)
        for value in (start, last):
            begin = window.index.scale * value + window.index.offset
            if begin < 0 or begin + window.size > extent:
                self.diag.refuse(
                    window.node,
                    f"at {window.index.var.name} = {value} the window [{begin}, "
                    f"{begin + window.size}) leaves axis {window.axis} of extent {extent}",
                    "make the loop cover whole windows (a tile step that divides the extent) "
                    "or move the window back inside the axis",
                )


def _combine(kind: type, lhs: Any, rhs: Any) -> LoopIndex | None:
    """The affine form of `lhs <op> rhs` when one side is a LoopIndex and the other an int."""
    if isinstance(lhs, LoopIndex) and isinstance(rhs, LoopIndex):
        if kind is ast.Add and lhs.var is rhs.var:
            return LoopIndex(lhs.var, lhs.scale + rhs.scale, lhs.offset + rhs.offset)
        return None
    if isinstance(lhs, LoopIndex) and is_int(rhs):
        if kind is ast.Add:
            return replace(lhs, offset=lhs.offset + rhs)
        if kind is ast.Sub:
            return replace(lhs, offset=lhs.offset - rhs)
        return LoopIndex(lhs.var, lhs.scale * rhs, lhs.offset * rhs)
    if isinstance(rhs, LoopIndex) and is_int(lhs):
        if kind is ast.Add:
            return replace(rhs, offset=rhs.offset + lhs)
        if kind is ast.Mult:
            return LoopIndex(rhs.var, rhs.scale * lhs, rhs.offset * lhs)
    return None
