"""`for i in range(...)` / `for i in tile(extent, step)` as one GridRegionExpr (hir §1.2).

Nothing is unrolled. A name bound before the loop and assigned inside it is a carry: inside the
body it reads a fresh phi Var (its first-iteration value is the pre-loop binding), the body's
final binding is the yield, and after the loop the name reads the region itself (one carry) or
`tuple_get_item` of it (several). Because the phis must exist before the body is built, the
carried names are found by scanning the body's assignments first. A loop that carries nothing
computes nothing a pure dataflow program can observe, so it is refused.
"""

from __future__ import annotations

import ast
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.frontend.scopes import assigned_names
from tilefoundry.frontend.subscripts import SubscriptBuilder
from tilefoundry.frontend.tile_window import TileWindow, tile
from tilefoundry.ir.core import BindingName, Expr, Tuple, Var
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.hir.grid_region import INDUCTION_TYPE
from tilefoundry.ir.types import is_shape_dim


class LoopBuilder(SubscriptBuilder):
    """The for-loop statement; `exec_block` is provided by the statement builder."""

    def _bounds(self, node: ast.For) -> tuple[str, Any, Any, Any]:
        """(kind, start, stop, step) of `range(...)` or `tile(extent, step)`."""
        call = node.iter
        if not isinstance(call, ast.Call):
            self.diag.refuse(
                node.iter,
                "a for loop iterates over range(...) or tile(extent, step)",
                "loops over tensors or Python sequences are not supported in HIR",
            )
        marker = self.eval(call.func)
        if marker is not range and marker is not tile:
            self.diag.refuse(
                node.iter,
                "a for loop iterates over range(...) or tile(extent, step)",
                "write for i in range(n): or for i in tile(n, step):",
            )
        args = [self.eval(a) for a in call.args]
        keywords = {k.arg: self.eval(k.value) for k in call.keywords}
        if marker is range:
            if keywords or not 1 <= len(args) <= 3:
                self.diag.refuse(
                    call,
                    "range takes 1 to 3 positional bounds",
                    "write range(stop), range(start, stop) or range(start, stop, step)",
                )
            start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
            kind = "range"
        else:
            if set(keywords) - {"step"} or ("step" in keywords and len(args) != 1):
                self.diag.refuse(call, "tile takes (extent, step)", "write tile(extent, step)")
            if "step" in keywords:
                args.append(keywords["step"])
            if len(args) != 2:
                self.diag.refuse(
                    call,
                    "tile needs an extent and a step",
                    "write tile(extent, step), or range(extent) for single steps",
                )
            start, stop, step = 0, args[0], args[1]
            kind = "tile"
        for value in (start, stop, step):
            if not is_shape_dim(value):
                self.diag.refuse(
                    call,
                    f"loop bound {value!r} must be a compile-time int or dim",
                    "use ints, DimVars of the signature, or arithmetic over them",
                )
        return kind, start, stop, step

    def _carried(self, node: ast.For) -> dict[str, ast.AST]:
        carried: dict[str, ast.AST] = {}
        for name, target in assigned_names(node.body).items():
            if name not in self.env.local:
                continue
            if not isinstance(self.env.local[name], Expr):
                self.diag.refuse(
                    target,
                    f"'{name}' holds the compile-time value {self.env.local[name]!r} and "
                    "is reassigned in the loop, which is not unrolled",
                    "use a new name inside the loop, or make it a tensor before the loop",
                )
            carried[name] = target
        return carried

    def stmt_For(self, node: ast.For, in_loop: bool) -> None:
        if node.orelse:
            self.diag.refuse(node, "for ... else is not supported", "drop the else block")
        if not isinstance(node.target, ast.Name):
            self.diag.refuse(
                node.target, "a loop variable must be a single name", "write for i in range(n):"
            )
        kind, start, stop, step = self._bounds(node)
        carried = self._carried(node)
        names = list(carried)
        inits = [self.env.local[n] for n in names]
        phis = [
            Var(n, i.type, metadata=(self.diag.source.span(carried[n]),))
            for n, i in zip(names, inits, strict=True)
        ]
        induction = Var(
            node.target.id, INDUCTION_TYPE, metadata=(self.diag.source.span(node.target),)
        )
        self.loop_domains[induction] = (start, stop, step)
        before = set(self.env.local)
        for name, phi in zip(names, phis, strict=True):
            self.env.bind(name, phi)
        self.env.bind(node.target.id, induction if kind == "range" else TileWindow(induction, step))
        self.exec_block(node.body, in_loop=True)
        if not carried:
            self.diag.refuse(
                node,
                "the loop assigns no name bound before it, so its result is never used",
                "bind the accumulator before the loop (acc = tf.zeros(...)) and assign it inside",
            )
        yields = [self._yield(node, n) for n in names]
        body = yields[0] if len(yields) == 1 else Tuple(tuple(yields), metadata=self.meta(node))
        single = (BindingName(names[0]),) if len(names) == 1 else ()
        region = GridRegionExpr(
            induction,
            tuple(phis),
            tuple(inits),
            body,
            tuple(yields),
            stop,
            step,
            start,
            metadata=(self.diag.source.span(node), *single),
        )
        try:
            self.ctx.infer(region)
        except VerifyError as err:
            raise self.diag.locate(err, node) from None
        for name in set(self.env.local) - before - set(names):
            self.env.forget(name, node.lineno + self.diag.source.first_line - 1)
        self.env.forget(node.target.id, node.lineno + self.diag.source.first_line - 1)
        if len(names) == 1:
            self.env.bind(names[0], region)
            return
        for index, name in enumerate(names):
            item = self.surface_call(node, "tuple_get_item", [region], {"index": index}, name)
            self.env.bind(name, item)

    def _yield(self, node: ast.For, name: str) -> Expr:
        value = self.env.local.get(name)
        if not isinstance(value, Expr):
            self.diag.refuse(
                node,
                f"the carried name '{name}' ends the loop body as {value!r}, not a tensor",
                "keep a carried name a tensor of one type throughout the loop",
            )
        return value
