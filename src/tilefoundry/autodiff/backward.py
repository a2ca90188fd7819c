"""The reverse walk: from the output cotangents back to the differentiated values.

A region (the function's body; a loop body, from its yields down to its carries and frontier; a
recomputed call's body, down to its arguments) is walked once in reverse post-order (every user
of a value before the value), so a value's cotangent is complete when its turn comes: its
contributions are summed (`cotangents`), settled to a state its rule may read
(`reshard_policy.settled`), and handed to the rule its op registered (the VJP registry: this
module never imports an op module), which returns one contribution per input. Only values that
depend on a differentiated value and have a float type receive cotangents (`varied`); an op that
registered a zero cotangent stops the walk, and an op with no rule on the path is refused, naming
the op and its line. A loop differentiates as a scan (`loops`), a call of a checkpointed Function
by recomputing its body there (`remat`).
"""

from __future__ import annotations

from collections.abc import Sequence

from tilefoundry.analysis import TypeInferContext, describe
from tilefoundry.autodiff.builder import Builder
from tilefoundry.autodiff.calls import inline_differentiated_calls
from tilefoundry.autodiff.cotangents import Accumulator, Cotangent
from tilefoundry.autodiff.loops import loop_vjp
from tilefoundry.autodiff.remat import is_checkpointed
from tilefoundry.autodiff.reshard_policy import settled
from tilefoundry.autodiff.rewrite import substitute
from tilefoundry.autodiff.varied import region_order, varied_nodes
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Op, Tuple, Var, source_span
from tilefoundry.ir.hir import Function, GridRegionExpr
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.rules import VJP, VJP_TAKES_PENDING
from tilefoundry.sharding.shard_reading import pending_partials


class Backward:
    """One transform's reverse walks. `replaced` maps each differentiated loop to the value of
    the forward loop extended to stack what its backward reads (`finish` swaps them in)."""

    def __init__(self, ctx: TypeInferContext):
        self.ctx = ctx
        self.ad = Builder(ctx)
        self.replaced: dict[Expr, Expr] = {}

    def region(
        self,
        roots: Sequence[Expr],
        seeds: Sequence[Cotangent],
        leaves: Sequence[Expr],
        varied_leaves: Sequence[Expr],
    ) -> dict[Expr, Cotangent]:
        """Each of `leaves` -> the sum of its cotangent contributions (None: it does not reach a
        root), given the cotangent `seeds[i]` of `roots[i]`; only `varied_leaves` are
        differentiated, and the walk does not go below a leaf."""
        order = region_order(roots, leaves)
        varied = varied_nodes(order, varied_leaves)
        accumulator = Accumulator()
        for root, seed in zip(roots, seeds, strict=True):
            if root in varied:
                accumulator.add(root, seed, "the output cotangent")
        stop = frozenset(leaves)
        for node in reversed(order):
            if node in stop or not accumulator.has(node) or isinstance(node, Var | Constant):
                continue
            ad = self.ad.at(node)
            total = accumulator.total(node, ad)
            for value, contribution in self._contributions(node, total, varied, ad):
                accumulator.add(value, contribution, describe(node))
        return {leaf: accumulator.total(leaf, self.ad) for leaf in dict.fromkeys(leaves)}

    def finish(self, roots: Sequence[Expr]) -> list[Expr]:
        """`roots` with every differentiated loop replaced by its stacking form."""
        if not self.replaced:
            return list(roots)
        memo = substitute(roots, self.replaced, self.ctx)
        return [memo[r] for r in roots]

    def _contributions(self, node: Expr, total: Cotangent, varied: set[Expr], ad: Builder):
        if isinstance(node, Tuple):
            return [
                (element, part)
                for element, part in zip(node.elements, total, strict=True)
                if element in varied
            ]
        if isinstance(node, GridRegionExpr):
            return loop_vjp(self, node, total, varied, ad)
        if isinstance(node, Call) and isinstance(node.target, Op):
            return _rule_contributions(node, total, varied, ad)
        if (
            isinstance(node, Call)
            and isinstance(node.target, Function)
            and is_checkpointed(node.target)
        ):
            return self._recomputed(node, total, varied)
        raise UnsupportedError(
            f"{describe(node)}: reverse-mode differentiation does not handle this node",
            location=source_span(node),
        )

    def _recomputed(self, call: Call, total: Cotangent, varied: set[Expr]):
        """A checkpointed call: its callee's body inlined here and differentiated (the forward
        of the callee runs again in the backward). The body reads the call's arguments through
        one optimization barrier taken together with the arriving cotangent, as `jax.checkpoint`
        does: a compiler cannot merge the recomputation with the original forward (XLA's CSE
        would, undoing the saving) nor start it before the backward reaches this call."""
        args = list(dict.fromkeys(call.args))
        passed, total = self._barriered(args, total, self.ad.at(call))
        callee = call.target
        params = {p: passed[a] for p, a in zip(callee.params, call.args, strict=True)}
        memo = substitute((callee.body,), params, self.ctx)
        leaves = [passed[a] for a in args]
        wanted = [passed[a] for a in args if a in varied]
        body = inline_differentiated_calls(memo[callee.body], wanted, stop=leaves)
        totals = self.region([body], [total], leaves=leaves, varied_leaves=wanted)
        return [(arg, totals[passed[arg]]) for arg in args if arg in varied]

    @staticmethod
    def _barriered(args: list[Expr], total: Cotangent, ad: Builder):
        """(each argument -> its value out of the barrier, the cotangent out of it)."""
        ct_leaves: list[Expr] = []

        def collect(part: Cotangent) -> None:
            if isinstance(part, tuple):
                for field in part:
                    collect(field)
            elif part is not None:
                ct_leaves.append(part)

        collect(total)
        barrier = ad.tf.optimization_barrier((*args, *ct_leaves))
        outs = iter(
            [ad.tf.tuple_get_item(barrier, index=i) for i in range(len(barrier.type.fields))]
        )
        passed = {a: next(outs) for a in args}

        def rebuilt(part: Cotangent) -> Cotangent:
            if isinstance(part, tuple):
                return tuple(rebuilt(field) for field in part)
            return None if part is None else next(outs)

        return passed, rebuilt(total)


def _rule_contributions(call: Call, total: Cotangent, varied: set[Expr], ad: Builder):
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
        return [
            (arg, thunk())
            for arg, thunk in zip(call.args, thunks, strict=True)
            if thunk is not None and arg in varied
        ]
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
