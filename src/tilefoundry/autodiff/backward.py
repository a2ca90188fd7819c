"""The reverse walk: from the output cotangents back to the differentiated parameters.

The forward body is walked once in reverse post-order (every user of a value before the value),
so a value's cotangent is complete when its turn comes: its contributions are summed
(`cotangents`), settled to a state its rule may read (`reshard_policy.settled`), and handed to the
rule its op registered (the VJP registry: this module never imports an op module), which returns
one contribution per input. Only values that depend on a differentiated parameter and have a float
type receive cotangents; an op that registered a zero cotangent stops the walk, and an op with no
rule on the path is refused, naming the op and its line.
"""

from __future__ import annotations

from collections.abc import Sequence

from tilefoundry.analysis import TypeInferContext, describe
from tilefoundry.autodiff.builder import Builder, is_float_tensor
from tilefoundry.autodiff.cotangents import Accumulator, Cotangent
from tilefoundry.autodiff.reshard_policy import settled
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import GridRegionExpr
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.rules import VJP, VJP_TAKES_PENDING, ZERO_COTANGENT
from tilefoundry.sharding.shard_reading import pending_partials


def differentiable(type_: object) -> bool:
    """Whether a value of `type_` carries a cotangent (a float tensor, or a tuple holding one)."""
    if isinstance(type_, TupleType):
        return any(differentiable(field) for field in type_.fields)
    return is_float_tensor(type_)


def varied_nodes(order: Sequence[Expr], wrt: frozenset[Var]) -> set[Expr]:
    """The nodes whose value depends on a differentiated parameter through float values. A
    loop depends on what its body reads from outside it as well as on its carries' initial
    values, so a loop reading a differentiated weight is refused, never a zero gradient."""
    varied: set[Expr] = set()
    for node in order:
        if not differentiable(node.type):
            continue
        if node in wrt:
            varied.add(node)
        elif any(o in varied for o in node.operands()):
            if isinstance(node, Call) and ZERO_COTANGENT.has(type(node.target)):
                continue
            varied.add(node)
    return varied


def backward(
    root: Expr, seed: Cotangent, wrt: Sequence[Var], ctx: TypeInferContext
) -> dict[Var, Expr | None]:
    """Each parameter of `wrt` -> the sum of its cotangent contributions (None: it does not
    reach the output), given the output cotangent `seed` of `root`."""
    wanted = frozenset(wrt)
    order = post_order((root,))
    varied = varied_nodes(order, wanted)
    ad = Builder(ctx)
    accumulator = Accumulator()
    if root in varied:
        accumulator.add(root, seed, "the output cotangent")
    for node in reversed(order):
        if not accumulator.has(node) or isinstance(node, Var | Constant):
            continue
        total = accumulator.total(node, ad.at(node))
        if isinstance(node, Tuple):
            for element, part in zip(node.elements, total, strict=True):
                if element in varied:
                    accumulator.add(element, part, "Tuple")
        elif isinstance(node, Call) and isinstance(node.target, Op):
            _apply_rule(node, total, varied, accumulator, ad.at(node))
        elif isinstance(node, GridRegionExpr):
            raise UnsupportedError(
                "GridRegionExpr: reverse-mode differentiation through a loop that carries a "
                "differentiated value, or whose body reads one, is not supported yet; write the "
                "iterations out as calls of one @func, or differentiate one iteration's @func",
                location=source_span(node),
            )
        else:
            raise UnsupportedError(
                f"{describe(node)}: reverse-mode differentiation does not handle this node",
                location=source_span(node),
            )
    return {var: accumulator.total(var, ad) for var in wrt}


def _apply_rule(
    call: Call, total: Cotangent, varied: set[Expr], accumulator: Accumulator, ad: Builder
) -> None:
    op_class = type(call.target)
    if not VJP.has(op_class):
        ad.refuse(
            "reverse-mode differentiation has no VJP rule for this op",
            "differentiate with respect to inputs that do not reach it, or complete the rule",
        )
    _refuse_pending_extrema(call, varied, ad)
    if op_class not in VJP_TAKES_PENDING:
        total = _settled(total, call.type, ad)
    try:
        thunks = VJP.lookup(op_class)(call, total, ad)
        for arg, thunk in zip(call.args, thunks, strict=True):
            if thunk is not None and arg in varied:
                accumulator.add(arg, thunk(), describe(call))
    except VerifyError as err:
        raise ad.located(err) from None


def _settled(cotangent: Cotangent, type_: object, ad: Builder) -> Cotangent:
    if isinstance(type_, TupleType):
        return tuple(
            None if part is None else _settled(part, field, ad)
            for part, field in zip(cotangent, type_.fields, strict=True)
        )
    return settled(cotangent, type_, ad)


def _refuse_pending_extrema(call: Call, varied: set[Expr], ad: Builder) -> None:
    """DESIGN §4.18: a differentiated value pending a max/min has no cotangent state (which
    addend holds the extremum is not known until it is completed)."""
    for type_ in (call.type, *(a.type for a in call.args if a in varied)):
        if not isinstance(type_, TensorType):
            continue
        for axis, reduction in pending_partials(type_).items():
            if reduction != "sum":
                ad.refuse(
                    f"a value pending Partial({reduction}) on "
                    f"{type_.layout.mesh.axes[axis].label} cannot be differentiated through",
                    "complete it first: insert reshard(x, ...) to Broadcast on that mesh axis",
                )
