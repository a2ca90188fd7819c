"""Statements of a function body (parser §5): assignments, loops, mesh scopes, return.

HIR is a single expression, so a body is executed against the lexical environment rather than
translated statement by statement: assignments only bind names, and the function's value is what
`return` names. Everything that would need control flow or mutation in the IR (`if` on a tensor,
`while`, `+=` in a loop, `return` in a loop, `try`, `del`, ...) is refused at its own line with
the spelling HIR does support.
"""

from __future__ import annotations

import ast
from typing import Any

from tilefoundry.frontend.expressions import is_runtime
from tilefoundry.frontend.loops import LoopBuilder
from tilefoundry.ir.core import Expr, Tuple
from tilefoundry.ir.types.shard import Layout, Mesh, Topology, make_mesh
from tilefoundry.ir.types.shard.mesh import c_order_strides

REFUSED_STATEMENTS = {
    ast.While: ("while loops are not supported in HIR", "use for i in range(n) or tile(n, step)"),
    ast.Try: ("try is not supported in a function body", "remove the try block"),
    ast.Raise: ("raise is not supported in a function body", "remove the raise"),
    ast.Assert: ("assert is not supported in a function body", "types are checked for you"),
    ast.Delete: ("del is not supported", "values are immutable; just stop using the name"),
    ast.Global: ("global is not supported", "capture the value from the enclosing scope"),
    ast.Nonlocal: ("nonlocal is not supported", "capture the value from the enclosing scope"),
    ast.Import: ("import inside a function body is not supported", "import at module level"),
    ast.ImportFrom: ("import inside a function body is not supported", "import at module level"),
    ast.FunctionDef: ("nested def is not supported", "define a @tilefoundry.func at module level"),
    ast.AsyncFunctionDef: ("nested def is not supported", "define a @tilefoundry.func"),
    ast.ClassDef: ("class definitions are not supported in a function body", "define it outside"),
    ast.Break: ("break is not supported", "loops run their whole iteration domain"),
    ast.Continue: ("continue is not supported", "loops run their whole iteration domain"),
    ast.AsyncFor: ("async for is not supported", "use for i in range(n)"),
    ast.AsyncWith: ("async with is not supported", "use with Mesh(...) as m:"),
    ast.Match: ("match is not supported", "use tf.where for value selection"),
}
if hasattr(ast, "TryStar"):
    REFUSED_STATEMENTS[ast.TryStar] = REFUSED_STATEMENTS[ast.Try]


class Returned:
    """The value a `return` produced, passed up through the enclosing blocks."""

    def __init__(self, value: Expr):
        self.value = value


class BodyBuilder(LoopBuilder):
    """Executes statements; `exec_block` returns a `Returned` once a return statement ran."""

    def exec_block(self, statements: list[ast.stmt], *, in_loop: bool) -> Returned | None:
        for position, statement in enumerate(statements):
            outcome = self.exec_statement(statement, in_loop)
            if outcome is not None:
                if position + 1 < len(statements):
                    self.diag.refuse(
                        statements[position + 1],
                        "unreachable statement after return",
                        "remove it or move the return to the end",
                    )
                return outcome
        return None

    def exec_statement(self, node: ast.stmt, in_loop: bool) -> Returned | None:
        outer, self.current = self.current, node
        try:
            method = getattr(self, f"stmt_{type(node).__name__}", None)
            if method is None:
                what, fix = REFUSED_STATEMENTS.get(
                    type(node), (f"{type(node).__name__} statements are not supported", None)
                )
                self.diag.refuse(node, what, fix)
            return method(node, in_loop)
        finally:
            self.current = outer

    # ---- simple statements ----------------------------------------------------------------------

    def stmt_Pass(self, node: ast.Pass, in_loop: bool) -> None:
        return None

    def stmt_Expr(self, node: ast.Expr, in_loop: bool) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None  # a docstring or a comment string
        self.diag.refuse(
            node,
            "the value of this expression is discarded (HIR is pure dataflow)",
            "assign it to a name or return it",
        )

    def stmt_AnnAssign(self, node: ast.AnnAssign, in_loop: bool) -> None:
        self.diag.refuse(
            node,
            "annotated assignments are not supported in a body",
            "drop the annotation; every value's type is inferred",
        )

    def stmt_Assign(self, node: ast.Assign, in_loop: bool) -> None:
        first = node.targets[0]
        name = first.id if isinstance(first, ast.Name) else None
        self.naming = (node.value, name) if name else None
        try:
            value = self.eval(node.value)
        finally:
            self.naming = None
        for target in node.targets:
            self.assign(target, value)

    def stmt_AugAssign(self, node: ast.AugAssign, in_loop: bool) -> None:
        if in_loop:
            self.diag.refuse(
                node,
                "augmented assignment (+= and friends) inside a loop body is not supported",
                "write the carry out in full: acc = acc + value",
            )
        if not isinstance(node.target, ast.Name):
            self.diag.refuse(node.target, "only a plain name can be updated", "use a name")
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        combined = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        ast.fix_missing_locations(combined)
        self.naming = (combined, node.target.id)
        try:
            value = self.eval(combined)
        finally:
            self.naming = None
        self.assign(node.target, value)

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.env.bind(target.id, value)
            return
        if isinstance(target, ast.Tuple | ast.List):
            self._unpack(target, value)
            return
        if isinstance(target, ast.Subscript):
            self.write_window(target, value)
            return
        self.diag.refuse(
            target,
            "only names can be assigned; tensors are immutable values",
            "bind a new name (use tf.insert_slice to write a window)",
        )

    def _unpack(self, target: ast.Tuple | ast.List, value: Any) -> None:
        count = len(target.elts)
        if isinstance(value, Tuple):
            parts = list(value.elements)
        elif isinstance(value, Expr) and hasattr(value.type, "fields"):
            parts = [
                self.surface_call(
                    element,
                    "tuple_get_item",
                    [value],
                    {"index": i},
                    element.id if isinstance(element, ast.Name) else None,
                )
                for i, element in enumerate(target.elts[: len(value.type.fields)])
            ]
            parts += [None] * (len(value.type.fields) - len(parts))
        elif isinstance(value, tuple):
            parts = list(value)
        else:
            self.diag.refuse(target, f"cannot unpack {value!r} into {count} names")
        if len(parts) != count:
            self.diag.refuse(
                target,
                f"unpacking {len(parts)} values into {count} names",
                f"use exactly {len(parts)} names",
            )
        for element, part in zip(target.elts, parts, strict=True):
            self.assign(element, part)

    # ---- compound statements --------------------------------------------------------------------

    def stmt_If(self, node: ast.If, in_loop: bool) -> Returned | None:
        test = self.eval(node.test)
        if is_runtime(test):
            self.diag.refuse(
                node,
                "if on a tensor value is not supported (HIR has no branches)",
                "compute both sides and select with tf.where(cond, a, b)",
            )
        chosen = node.body if self.diag.static(node.test, bool, test) else node.orelse
        return self.exec_block(chosen, in_loop=in_loop)

    def stmt_Return(self, node: ast.Return, in_loop: bool) -> Returned:
        if in_loop:
            self.diag.refuse(
                node,
                "return inside a loop is not supported",
                "assign the value to a name bound before the loop and return it after",
            )
        if node.value is None:
            self.diag.refuse(node, "a function returns a value", "write return <tensor>")
        value = self.eval(node.value)
        return Returned(self._returned(node.value, value))

    def _returned(self, node: ast.AST, value: Any) -> Expr:
        if isinstance(value, tuple):
            elements = node.elts if isinstance(node, ast.Tuple) else [node] * len(value)
            parts = tuple(self._returned(n, v) for n, v in zip(elements, value, strict=True))
            result = Tuple(parts, metadata=self.meta(node))
            self.ctx.infer(result)
            return result
        if not isinstance(value, Expr):
            self.diag.refuse(
                node,
                f"a function returns tensor values, not {value!r}",
                "return a tensor (or a tuple of tensors)",
            )
        return value

    def stmt_With(self, node: ast.With, in_loop: bool) -> Returned | None:
        if in_loop:
            self.diag.refuse(
                node,
                "with Mesh(...) inside a loop is not supported",
                "open the mesh scope outside the loop",
            )
        if len(node.items) != 1:
            self.diag.refuse(node, "one mesh per with statement", "nest the with statements")
        item = node.items[0]
        target = item.optional_vars
        if target is not None and not isinstance(target, ast.Name):
            self.diag.refuse(target, "bind the mesh to a single name", "write ... as m:")
        mesh = self._scope_mesh(item.context_expr)
        name = target.id if target is not None else None
        with self.env.mesh_scope(name, mesh, self.diag.source.span(node)):
            return self.exec_block(node.body, in_loop=in_loop)

    def _scope_mesh(self, node: ast.expr) -> Mesh:
        """`Mesh(topology="cta", layout=(4,), names=("w",))`, or an expression giving a Mesh."""
        if isinstance(node, ast.Call) and self.eval(node.func) is Mesh:
            if node.args:
                self.diag.refuse(
                    node,
                    "Mesh(...) in a with statement takes keywords",
                    'write Mesh(topology="cta", layout=(4,), names=("w",))',
                )
            keywords = {k.arg: self.eval(k.value) for k in node.keywords}
            unknown = set(keywords) - {"topology", "layout", "names"}
            if unknown or "topology" not in keywords or "layout" not in keywords:
                self.diag.refuse(
                    node,
                    "a mesh scope needs topology= and layout= (and optionally names=)",
                    'write Mesh(topology="cta", layout=(4,), names=("w",))',
                )
            return self.diag.static(node, _make_scope_mesh, **keywords)
        value = self.eval(node)
        if not isinstance(value, Mesh):
            self.diag.refuse(
                node,
                f"with takes a mesh scope, got {value!r}",
                "write with Mesh(topology=..., layout=..., names=...) as m:",
            )
        return value


def _make_scope_mesh(topology: Any, layout: Any, names: Any = None) -> Mesh:
    shape = tuple(layout) if isinstance(layout, tuple | list) else (layout,)
    if isinstance(topology, Topology):
        return Mesh(topology, Layout(shape, c_order_strides(shape)), names)
    return make_mesh(shape, names, topology)
