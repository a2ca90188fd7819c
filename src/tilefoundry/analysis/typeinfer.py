"""The typeinfer driver: a per-walk context and the rules for the core Expr nodes.

The driver owns what every rule would otherwise repeat: caching each node's type (keyed on the
node, since Exprs are identities), stamping it once, and locating errors — a rule may raise a
bare `VerifyError` and the driver attaches the source span of the node being typed, so every
diagnostic about source-built IR ends with `at file:line:col`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from tilefoundry.caches import Memo
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order, right_to_left
from tilefoundry.ir.types import TupleType, Type, UnitType, is_type
from tilefoundry.rules.registry import CALLEE_TYPEINFER, TYPEINFER, register_typeinfer


def describe(node: Any) -> str:
    """The `<OpClass or ExprClass>` prefix of a diagnostic about `node`."""
    if isinstance(node, Call):
        node = node.target
    if isinstance(node, Op):
        return type(node).__name__
    name = getattr(node, "name", None)
    return f"{type(node).__name__} {name}" if isinstance(name, str) else type(node).__name__


_RIGHT_TO_LEFT = right_to_left(BLOCK_OPERANDS)


def _located(err: VerifyError, node: Expr | None) -> VerifyError:
    return err.with_location(source_span(node))


class TypeInferContext:
    """One typing walk: the node → type cache and the Call whose op rule is running."""

    def __init__(self) -> None:
        self._cache: dict[Expr, Type] = {}
        self._call: Call | None = None
        self.call_was_read = False
        """Whether a rule looked at `call` (its literals) since `_call` last cleared the flag: such
        a result depends on more than (op, operand types) and is not memoised."""

    @property
    def call(self) -> Call | None:
        """The Call whose target's rule is running (rules may read its literal operands)."""
        self.call_was_read = True
        return self._call

    def infer(self, expr: Expr) -> Type:
        """The type of `expr`, computed once per context and stamped onto unstamped nodes."""
        if not isinstance(expr, Expr):
            raise VerifyError(f"typeinfer: {expr!r} is not an Expr")
        cache = self._cache
        cached = cache.get(expr)
        if cached is not None:
            return cached
        if not all(map(cache.__contains__, expr.block_operands())):  # usually all are typed
            try:
                self._infer_operands_first(expr)
            except VerifyError as err:
                raise _located(err, expr) from None
        return self._infer_node(expr)

    def assume(self, expr: Expr, type_: Type) -> None:
        """Take `type_` as `expr`'s type without running its rule (the verifier's already-checked
        nodes: re-deriving a new node's type then stops at them)."""
        self._cache[expr] = type_

    def _infer_operands_first(self, root: Expr) -> None:
        """Type the operands below `root` bottom-up (last operand first) from an explicit walk,
        so a deep Call chain does not hit Python's recursion limit through nested rule calls.
        A loop's body is typed by the loop's own rule, so the walk stays in `root`'s block."""
        cache = self._cache
        walk = post_order(reversed(root.block_operands()), _RIGHT_TO_LEFT, done=cache)
        for node in walk:
            if node not in cache:  # a loop's rule may have typed a value its body shares
                self._infer_node(node)

    def _infer_node(self, expr: Expr) -> Type:
        rule = TYPEINFER.lookup(type(expr))
        try:
            result = rule(expr, self)
        except VerifyError as err:
            located = _located(err, expr)
            if located is err:
                raise
            raise located from None
        if expr.type is None:
            expr.stamp_type(result)
        self._cache[expr] = result
        return result

    @contextmanager
    def typing_call(self, call: Call) -> Iterator[None]:
        """Expose `call` as `ctx.call` while its target's rule runs (rules may read literals)."""
        outer, self._call = self._call, call
        try:
            yield
        finally:
            self._call = outer

    def error(self, node: Any, message: str) -> NoReturn:
        """Raise the diagnostic `"<OpClass>: message"` located at `node` (an Op means the Call
        being typed)."""
        where = self._call if isinstance(node, Op) else node
        raise VerifyError(f"{describe(node)}: {message}", location=source_span(where))


@register_typeinfer(Var)
def _var(var: Var, ctx: TypeInferContext) -> Type:
    return var.type


@register_typeinfer(Constant)
def _constant(constant: Constant, ctx: TypeInferContext) -> Type:
    return constant.type


@register_typeinfer(Tuple)
def _tuple(node: Tuple, ctx: TypeInferContext) -> Type:
    return TupleType(tuple(ctx.infer(e) for e in node.elements))


_OP_RESULTS = Memo("typeinfer: op rule results", 1 << 16)
"""(op, its attribute value classes, operand types) -> the op rule's result, for this process.

An op rule is a pure function of the op's attributes and its operand types (it reads the context
only to locate an error; a rule that reads the Call's literals is seen doing so and is not
memoised), so a program that repeats one op on one shape — every layer of a
decoder, every re-typing by a pass or the verifier — runs the rule once. Only successes are
remembered: an error is raised afresh at its own call site. Function and FusionRegion callees are
not memoised (their type is their body's)."""


def _op_key(op: Op, arg_types: tuple[Type, ...]) -> tuple:
    """The memo key; the attribute values' classes are part of it because `1 == 1.0 == True`.
    Hashing it raises TypeError when something in it is not hashable (then the rule simply
    runs)."""
    values = op._values  # the attribute dict Op hashes and compares by
    return (op, tuple(type(v) for v in values.values()), arg_types)


@register_typeinfer(Call)
def _call(call: Call, ctx: TypeInferContext) -> Type:
    cache = ctx._cache  # operands are typed first (`infer`), so this is the usual lookup
    arg_types = tuple([cache[a] if a in cache else ctx.infer(a) for a in call.args])
    target = call.target
    key = _op_key(target, arg_types) if isinstance(target, Op) else None
    if key is not None:
        try:
            cached = _OP_RESULTS.get(key)
        except TypeError:
            key = cached = None
        if cached is not None:
            return cached
    registry = TYPEINFER if isinstance(target, Op) else CALLEE_TYPEINFER
    rule = registry.lookup(type(target))
    ctx.call_was_read = False
    with ctx.typing_call(call):
        result = rule(target, arg_types, ctx)
    if isinstance(result, UnitType):
        ctx.error(
            call, "effect-form call (UnitType result) is not allowed in HIR; HIR is value-form"
        )
    if key is not None and not ctx.call_was_read:
        _OP_RESULTS.put(key, result)
    return result


def typeinfer_call(target: Op | Expr, *arg_types: Type) -> Type:
    """The type of `target` applied to arguments of `arg_types` (a Function target elaborates)."""
    for i, t in enumerate(arg_types):
        if not is_type(t):
            raise VerifyError(f"typeinfer_call: argument {i} is not a Type: {t!r}")
    args = tuple(Var(f"arg{i}", t) for i, t in enumerate(arg_types))
    return TypeInferContext().infer(Call(target, args))
