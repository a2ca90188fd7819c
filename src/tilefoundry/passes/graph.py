"""The graph plumbing every pass shares: a rebuilder over the canonical walk.

HIR is SSA-as-DAG with identity sharing, so a pass is "walk in a deterministic post-order and
rebuild what changed". Doing that once here keeps each pass to its own rule and guarantees that
every pass visits nodes in the same canonical order (`ir.core.graph.post_order`: DFS post-order
from the returned value, operands left to right — the order the printer numbers values in),
which is what makes their output stable across runs and hash seeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import is_
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Constant, Expr, Module, Tuple, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.walk import callees_first
from tilefoundry.ir.types import StorageKind, TensorType, TupleType, Type

OnCall = Callable[[Call, tuple[Expr, ...], TypeInferContext], Expr]
"""`on_call(old_call, new_args, ctx) -> new node` (typed); the rebuilder's one hook."""


def region_bodies(root: Expr) -> Iterator[tuple[Call, FusionRegion]]:
    """Every Call of a FusionRegion under `root`, in post-order."""
    for node in post_order((root,)):
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            yield node, node.target


def type_bytes(type_: Type) -> int | None:
    """Bytes a value of `type_` occupies in memory (an unmaterialised umat value occupies none);
    None when a dim is symbolic."""
    if isinstance(type_, TupleType):
        parts = [type_bytes(f) for f in type_.fields]
        return None if None in parts else sum(parts)
    if not isinstance(type_, TensorType) or type_.storage == StorageKind.UMAT:
        return 0
    count = 1
    for dim in type_.shape:
        if not isinstance(dim, int):
            return None
        count *= dim
    return (count * type_.dtype.itemsize_bits + 7) // 8


class Rebuilder:
    """Rebuilds Functions (and the Functions they call) node by node through `on_call`.

    An unchanged node is reused, not copied, so a pass that changes nothing returns IR that shares
    every node with its input. Callee Functions are rebuilt once each (`functions` memo), so a
    module's call graph keeps its sharing.
    """

    def __init__(self, on_call: OnCall):
        self.on_call = on_call
        self.functions: dict[Function, Function] = {}
        self.memo: dict[Expr, Expr] = {}
        """old node -> rebuilt node for the body being rebuilt (hooks read operands through it)."""

    def module_or_function(self, obj: Any) -> Any:
        if isinstance(obj, Module):
            return Module(
                obj.name,
                [self.function(fn) for fn in obj.functions],
                obj.target,
                obj.topologies,
            )
        return self.function(obj)

    def function(self, fn: Function) -> Function:
        if fn not in self.functions:
            # Callees are rebuilt before their callers, so rebuilding a call finds its target
            # done: a chain of nested @func calls costs no recursion per level.
            for callee in callees_first(fn):
                if callee not in self.functions:
                    self.functions[callee] = self._rebuild_function(callee)
        return self.functions[fn]

    def _rebuild_function(self, fn: Function) -> Function:
        if fn.body is None:
            variants = tuple(self.function(v) for v in fn.variants)
            if all(a is b for a, b in zip(variants, fn.variants, strict=True)):
                return fn
            return Function(
                fn.name, fn.params, None, fn.return_type, variants=variants,
                label=fn.label, metadata=fn.metadata,
            )  # fmt: skip
        body = self.expr(fn.body)
        if body is fn.body:
            return fn
        return Function(
            fn.name, fn.params, body, fn.return_type, specializations=fn.specializations,
            label=fn.label, metadata=fn.metadata,
        )  # fmt: skip

    def expr(self, root: Expr) -> Expr:
        ctx = TypeInferContext()
        memo: dict[Expr, Expr] = {}
        self.memo = memo
        for node in post_order((root,)):
            memo[node] = self._copy(node, memo, ctx)
        return memo[root]

    def _copy(self, node: Expr, memo: dict[Expr, Expr], ctx: TypeInferContext) -> Expr:
        kind = type(node)
        if kind is Var or kind is Constant:
            return node
        if kind is Call and not isinstance(node.target, Function):
            return self.on_call(node, tuple(map(memo.__getitem__, node.args)), ctx)
        if isinstance(node, Tuple):
            elements = tuple(memo[e] for e in node.elements)
            if _same(elements, node.elements):
                return node
            new = Tuple(elements, metadata=node.metadata)
        elif isinstance(node, GridRegionExpr):
            inits = tuple(memo[e] for e in node.init_args)
            yields = tuple(memo[e] for e in node.yield_values)
            body = memo[node.body]
            if _same((*inits, body, *yields), (*node.init_args, node.body, *node.yield_values)):
                return node
            new = GridRegionExpr(
                node.induction_var, node.carried_args, inits, body, yields, node.extent,
                node.step, node.start, metadata=node.metadata,
            )  # fmt: skip
        elif isinstance(node, Call):
            args = tuple(memo[a] for a in node.args)
            target = node.target
            if isinstance(target, Function):
                target = self.function(target)
                if target is not node.target:
                    return typed_node(Call(target, args, metadata=node.metadata), ctx)
            return self.on_call(node, args, ctx)
        else:
            return node
        return typed_node(new, ctx)


def _same(new: tuple[Expr, ...], old: tuple[Expr, ...]) -> bool:
    return len(new) == len(old) and all(map(is_, new, old))


def typed_node(node: Expr, ctx: TypeInferContext) -> Expr:
    """Type a new node. Its operands are typed already (verified input, or new and typed here):
    their stamped types are their rules', so typing stops at them instead of re-typing the
    unchanged graph below."""
    for operand in node.operands():
        if operand.type is not None:
            ctx.assume(operand, operand.type)
    ctx.infer(node)
    return node


def copy_call(call: Call, args: tuple[Expr, ...], ctx: TypeInferContext) -> Expr:
    """The default `on_call`: reuse `call` when its arguments are unchanged, else a copy that
    keeps the target and every metadata entry (source span, binding name). The copy is re-typed
    only when an operand's type changed: an op rule is a function of the op and its operand
    types (and of literal operands, which a same-type copy keeps), so otherwise the copy's type
    is `call`'s. The verifier after the pass re-derives it either way."""
    if _same(args, call.args):
        return call
    if same_operand_types(args, call.args):
        return Call(call.target, args, call.type, metadata=call.metadata)
    return typed_node(Call(call.target, args, metadata=call.metadata), ctx)


def same_operand_types(new: tuple[Expr, ...], old: tuple[Expr, ...]) -> bool:
    """Each new operand is the old one, or a non-literal of the same type (the old one typed)."""
    for a, b in zip(new, old, strict=True):
        if a is b:
            continue
        if b.type is None or a.type != b.type or isinstance(a, Constant) or isinstance(b, Constant):
            return False
    return True
