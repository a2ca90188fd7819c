"""Expressions of a function body: operators, names, attributes, calls (parser §1.9, §4, §5).

A value is either an IR node (a tensor computed at run time) or a compile-time Python value (a
number, a DimVar, a mesh axis, a captured numpy array, layout sugar...). Operators on two
compile-time values are plain Python; as soon as a tensor is involved they become op Calls
through the surface registry (`+` is `tf.add`, `@` is `tf.matmul`), so the frontend never imports
an op class. Every node is typed as it is built, so an ill-typed expression fails at its own
line, and every node carries the SourceSpan of the AST node it came from.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.frontend.calls import SurfaceOp, build_surface_call, constant, float_dtype_of
from tilefoundry.frontend.errors import Diagnostics
from tilefoundry.frontend.operators import (
    BINARY_SURFACE,
    COMPARE_SURFACE,
    PYTHON_BINARY,
    PYTHON_COMPARE,
    PYTHON_UNARY,
    STATIC_BUILTINS,
    STATIC_MODULES,
    UNSUPPORTED_EXPRESSIONS,
)
from tilefoundry.frontend.scopes import Environment, is_missing
from tilefoundry.frontend.tile_window import TileWindow, tile
from tilefoundry.frontend.transforms import at_call_site, is_function_transform
from tilefoundry.ir.core import BindingName, Call, Expr, Metadata, Module, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, elaborate
from tilefoundry.ir.types import TensorType, f32
from tilefoundry.ir.types.shard import Mesh, MeshAxis, Partial
from tilefoundry.ir.types.shard.sugar import SplitSugar
from tilefoundry.rules import surface_entry


def is_runtime(value: Any) -> bool:
    return isinstance(value, Expr | TileWindow)


def is_static_callable(fn: Any) -> bool:
    """Compile-time helpers a body may call on compile-time values (the restricted evaluator)."""
    try:
        if fn in STATIC_BUILTINS:
            return True
    except TypeError:
        return False
    module = getattr(fn, "__module__", None) or ""
    return any(module == m or module.startswith(m + ".") for m in STATIC_MODULES)


SHALLOW_CHAIN = 64
"""Operator chains up to this many links are evaluated by plain recursion (the usual case)."""


def _operator_chain(root: ast.BinOp | ast.UnaryOp) -> list[ast.AST]:
    """The BinOp/UnaryOp nodes nested under `root` (itself last), operands before users, found
    without recursion: `x + x + ... + x` and `- - - x` nest as deep as they are long, so a long
    one is evaluated bottom-up from this list instead of by recursion that would reach Python's
    recursion limit."""
    return post_order((root,), _operator_operands)


def _operator_operands(node: ast.BinOp | ast.UnaryOp) -> tuple[ast.AST, ...]:
    children = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.operand,)
    return tuple(c for c in children if isinstance(c, ast.BinOp | ast.UnaryOp))


class ExpressionBuilder:
    """Evaluates expression nodes against an Environment, building typed IR for tensor values."""

    def __init__(self, diagnostics: Diagnostics, env: Environment, ctx: TypeInferContext):
        self.diag = diagnostics
        self.env = env
        self.ctx = ctx
        self.naming: tuple[ast.AST, str] | None = None
        self.current: ast.AST | None = None
        self.loop_domains: dict[Any, tuple[Any, Any, Any]] = {}
        """induction Var -> (start, stop, step) of its loop, to prove windows in range."""
        self.ready: dict[int, Any] = {}
        """Values of operator nodes evaluated ahead of their parent (`_operator_chain`)."""

    # ---- helpers --------------------------------------------------------------------------------

    def meta(self, node: ast.AST, name: str | None = None) -> tuple[Metadata, ...]:
        """SourceSpan of `node`, its binding name when it is an assignment's value, mesh scopes."""
        entries: list[Metadata] = [self.diag.source.span(node)]
        if name is None and self.naming is not None and self.naming[0] is node:
            name = self.naming[1]
        if name is not None:
            entries.append(BindingName(name))
        return (*entries, *self.env.scope_metadata())

    def surface_call(
        self, node: ast.AST, surface: str, args: list, kwargs: dict, name: str | None = None
    ) -> Call:
        entry = surface_entry(surface)
        if entry is None:
            self.diag.refuse(node, f"no op provides tf.{surface}", "load the op catalog")
        args = [v.start if isinstance(v, TileWindow) else v for v in args]
        try:
            return build_surface_call(
                entry, args, kwargs, ctx=self.ctx, metadata=self.meta(node, name)
            )
        except VerifyError as err:
            raise self.diag.locate(err, node) from None

    def tensor_operand(self, node: ast.AST, value: Any, others: list) -> Expr:
        """An operand of an operator: a tensor, or a compile-time scalar made a Constant."""
        if isinstance(value, TileWindow):
            return value.start
        if isinstance(value, Expr):
            return value
        if isinstance(value, bool | int | float) or _is_numpy(value):
            dtype = f32
            if isinstance(value, float):
                dtype = self.diag.static(node, float_dtype_of, "operator", others)
            return constant(value, dtype, self.meta(node))
        self.diag.refuse(
            node,
            f"{type(value).__name__} value {value!r} cannot be a tensor operand",
            "use a tensor, a number or a captured numpy array",
        )

    # ---- dispatch -------------------------------------------------------------------------------

    def eval(self, node: ast.AST) -> Any:
        if id(node) in self.ready:
            return self.ready.pop(id(node))
        if isinstance(node, ast.BinOp | ast.UnaryOp):
            chain = _operator_chain(node)
            if len(chain) > SHALLOW_CHAIN:
                for link in chain:  # innermost first: each link's operands are ready
                    self.ready[id(link)] = self._dispatch(link)
                return self.ready.pop(id(node))
        return self._dispatch(node)

    def _dispatch(self, node: ast.AST) -> Any:
        outer, self.current = self.current, node
        try:
            method = getattr(self, f"eval_{type(node).__name__}", None)
            if method is not None:
                return method(node)
            what, fix = UNSUPPORTED_EXPRESSIONS.get(
                type(node), (f"{type(node).__name__} expressions are not supported", None)
            )
            self.diag.refuse(node, what, fix)
        finally:
            self.current = outer

    def eval_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def eval_Name(self, node: ast.Name) -> Any:
        value = self.env.lookup(node.id)
        if is_missing(value):
            if node.id in self.env.loop_only:
                line = self.env.loop_only[node.id]
                self.diag.refuse(
                    node,
                    f"'{node.id}' is assigned only inside the loop at line {line}, so it has no "
                    "value after the loop",
                    f"assign '{node.id}' before the loop so the loop carries it",
                )
            self.diag.refuse(
                node,
                f"unknown name '{node.id}'",
                "define it before this line, or capture it from the enclosing scope",
            )
        return value

    def eval_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.eval(e) for e in node.elts)

    eval_List = eval_Tuple

    def eval_Set(self, node: ast.Set) -> frozenset:
        values = [self.eval(e) for e in node.elts]
        for element, value in zip(node.elts, values, strict=True):
            if is_runtime(value):
                self.diag.refuse(
                    element, "a set holds compile-time values only", 'write {m.a @ P("sum")}'
                )
        return self.diag.static(node, frozenset, values)

    def eval_Attribute(self, node: ast.Attribute) -> Any:
        owner = self.eval(node.value)
        if isinstance(owner, TileWindow):
            owner = owner.start
        if isinstance(owner, Expr):
            return self._tensor_attribute(node, owner)
        return self.diag.static(node, getattr, owner, node.attr)

    def _tensor_attribute(self, node: ast.Attribute, value: Expr) -> Any:
        type_ = value.type
        if isinstance(type_, TensorType) and node.attr in ("shape", "dtype", "ndim"):
            return {"shape": type_.shape, "dtype": type_.dtype, "ndim": type_.rank}[node.attr]
        self.diag.refuse(
            node,
            f"tensor values have no attribute '{node.attr}'",
            "read .shape, .dtype or .ndim, or call a tf.<op>",
        )

    def eval_IfExp(self, node: ast.IfExp) -> Any:
        test = self.eval(node.test)
        if is_runtime(test):
            self.diag.refuse(
                node,
                "a conditional expression on a tensor is not supported",
                "use tf.where(cond, a, b)",
            )
        chosen = self.diag.static(node.test, bool, test)
        return self.eval(node.body if chosen else node.orelse)

    # ---- operators ------------------------------------------------------------------------------

    def eval_BinOp(self, node: ast.BinOp) -> Any:
        lhs, rhs = self.eval(node.left), self.eval(node.right)
        kind = type(node.op)
        if not (is_runtime(lhs) or is_runtime(rhs)):
            if kind is ast.MatMult and _is_axis_tuple(rhs):
                return SplitSugar(lhs, rhs)
            return self.diag.static(node, PYTHON_BINARY[kind], lhs, rhs)
        if kind not in BINARY_SURFACE:
            symbol = {ast.Pow: "**", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}[kind]
            self.diag.refuse(
                node,
                f"the operator {symbol} has no HIR op on tensors",
                "use tf.square(x) or x * x for powers" if kind is ast.Pow else "use a tf.<op>",
            )
        return self._operator_call(node, BINARY_SURFACE[kind], node.left, lhs, node.right, rhs)

    def _operator_call(
        self, node: ast.AST, surface: str, lnode: ast.AST, lhs: Any, rnode: ast.AST, rhs: Any
    ) -> Call:
        tensors = [v.start if isinstance(v, TileWindow) else v for v in (lhs, rhs) if is_runtime(v)]
        operands = [
            self.tensor_operand(lnode, lhs, tensors),
            self.tensor_operand(rnode, rhs, tensors),
        ]
        return self.surface_call(node, surface, operands, {})

    def eval_Compare(self, node: ast.Compare) -> Any:
        values = [self.eval(node.left), *(self.eval(c) for c in node.comparators)]
        if not any(is_runtime(v) for v in values):
            result = True
            for op, lhs, rhs in zip(node.ops, values, values[1:], strict=False):
                result = result and self.diag.static(node, PYTHON_COMPARE[type(op)], lhs, rhs)
            return result
        if len(node.ops) != 1:
            self.diag.refuse(
                node,
                "chained comparisons on tensors are not supported",
                "compare pairwise and combine with &",
            )
        kind = type(node.ops[0])
        if kind not in COMPARE_SURFACE:
            self.diag.refuse(
                node,
                "is / in comparisons on tensors are not supported",
                "use ==, !=, <, <=, > or >=",
            )
        return self._operator_call(
            node, COMPARE_SURFACE[kind], node.left, values[0], node.comparators[0], values[1]
        )

    def eval_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.eval(node.operand)
        kind = type(node.op)
        if not is_runtime(value):
            return self.diag.static(node, PYTHON_UNARY[kind], value)
        operand = self.tensor_operand(node.operand, value, [])
        if kind is ast.UAdd:
            return operand
        if kind is ast.USub:
            return self.surface_call(node, "neg", [operand], {})
        if kind is ast.Not:
            self.diag.refuse(
                node, "`not` on a tensor is not supported", "write ~x or tf.logical_not(x)"
            )
        dtype = getattr(operand.type, "dtype", None)
        if dtype is None or not dtype.is_bool:
            self.diag.refuse(
                node,
                f"~ is logical_not and needs a bool tensor, got {operand.type}",
                "compare first (x != 0) or use -x for negation",
            )
        return self.surface_call(node, "logical_not", [operand], {})

    def eval_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.eval(v) for v in node.values]
        if any(is_runtime(v) for v in values):
            spelled = "&" if isinstance(node.op, ast.And) else "|"
            self.diag.refuse(
                node,
                "and / or on tensors are not supported",
                f"use {spelled} on bool tensors (parenthesise the comparisons)",
            )
        result = values[0]
        for value in values[1:]:
            result = (result and value) if isinstance(node.op, ast.And) else (result or value)
        return result

    # ---- calls ----------------------------------------------------------------------------------

    def eval_Call(self, node: ast.Call) -> Any:
        callee = self.eval(node.func)
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.diag.refuse(
                    arg, "*args in a call is not supported", "pass arguments one by one"
                )
        for keyword in node.keywords:
            if keyword.arg is None:
                self.diag.refuse(node, "**kwargs in a call is not supported", "pass keywords")
        args = [self.eval(a) for a in node.args]
        kwargs = {k.arg: self.eval(k.value) for k in node.keywords}
        if isinstance(callee, SurfaceOp):
            return self.surface_call(node, callee.entry.name, args, kwargs)
        if isinstance(callee, Function):
            return self._function_call(node, callee, args, kwargs)
        if is_function_transform(callee):
            return self._transform_call(node, callee, args, kwargs)
        return self._static_call(node, callee, args, kwargs)

    def _transform_call(self, node: ast.Call, transform: Any, args: list, kwargs: dict) -> Any:
        """`grad(f, argnums=1)` in a body: run at parse time on compile-time values (the
        Function and its options); the Function it returns is then called like any @func."""
        for value in [*args, *kwargs.values()]:
            if is_runtime(value) and not isinstance(value, Function):
                name = self.diag.source.snippet(node.func)
                self.diag.refuse(
                    node,
                    f"'{name}' transforms a @func at compile time and cannot take a tensor",
                    f"pass the function: {name}(f, ...)(tensors...)",
                )
        try:
            return transform(*args, **kwargs)
        except VerifyError as err:
            spans = {source_span(a) for a in args if isinstance(a, Function)}
            if err.location in spans:  # about the call (its argnums...), not inside the callee
                err = type(err)(err.message)
            raise self.diag.locate(err, node) from None

    def _function_call(self, node: ast.Call, callee: Function, args: list, kwargs: dict) -> Call:
        if kwargs:
            self.diag.refuse(
                node,
                f"keyword arguments to Function {callee.name} are not supported",
                "pass its parameters positionally",
            )
        tensors = [a for a in args if is_runtime(a)]
        exprs = [
            self.tensor_operand(a_node, a, tensors)
            for a_node, a in zip(node.args, args, strict=True)
        ]
        try:
            types = tuple(e.type for e in exprs)
            target = elaborate(at_call_site(callee, types), types)
            call = Call(target, tuple(exprs), metadata=self.meta(node))
            self.ctx.infer(call)
        except VerifyError as err:
            raise self.diag.locate(err, node) from None
        return call

    def _static_call(self, node: ast.Call, callee: Any, args: list, kwargs: dict) -> Any:
        name = self.diag.source.snippet(node.func)
        if _is_loop_marker(callee):
            self.diag.refuse(
                node,
                f"{name}(...) is only valid as the iterable of a for loop",
                f"write for i in {name}(...):",
            )
        if callee is Partial and not args and not kwargs:
            self.diag.refuse(
                node, "P() needs its reduction", 'write P("sum"), P("max") or P("min")'
            )
        if callee is Mesh:
            self.diag.refuse(
                node,
                "Mesh(...) in a body is only valid as a with item",
                "write with Mesh(topology=..., layout=..., names=...) as m:",
            )
        if isinstance(callee, Module):
            self.diag.refuse(
                node,
                f"calling Module {callee.name} is not supported",
                f"call one of its functions: {name}.<function>(...)",
            )
        if not callable(callee) or not is_static_callable(callee):
            self.diag.refuse(
                node,
                f"unknown callable '{name}'",
                "call a @tilefoundry.func function, a tf.<op>, or a compile-time helper",
            )
        for arg_node, value in [*zip(node.args, args, strict=True)]:
            if is_runtime(value):
                self.diag.refuse(
                    arg_node,
                    f"'{name}' is evaluated at compile time and cannot take a tensor",
                    "use the matching tf.<op>",
                )
        for value in kwargs.values():
            if is_runtime(value):
                self.diag.refuse(
                    node,
                    f"'{name}' is evaluated at compile time and cannot take a tensor",
                    "use the matching tf.<op>",
                )
        return self.diag.static(node, callee, *args, **kwargs)


def _is_axis_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(a, MeshAxis) for a in value)


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray | np.generic)


def _is_loop_marker(value: Any) -> bool:
    return value is range or value is tile
