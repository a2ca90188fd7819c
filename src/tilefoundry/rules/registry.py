"""Class-keyed rule registries, one per rule kind.

Every analysis or exit (typeinfer, access relations, the evaluator, StableHLO) finds the rule for
an op through one of these tables, so engines never import an op module: the op module registers
its rules by decorator at import time. Lookups are by exact class and loud: a subclass does not
inherit its parent's rule, and a missing rule is an `UnsupportedError` naming the op and the rule
kind rather than a silent fallback — an unhandled op must fail closed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tilefoundry.errors import InternalCompilerError, UnsupportedError

R = TypeVar("R", bound=Callable[..., Any])


class Registry:
    """The rules of one kind, keyed by the class they handle."""

    def __init__(self, kind: str):
        self.kind = kind
        self._rules: dict[type, Callable[..., Any]] = {}

    def register(self, cls: type) -> Callable[[R], R]:
        """Decorator: make the decorated function the `kind` rule of exactly `cls`."""
        if not isinstance(cls, type):
            raise InternalCompilerError(f"register {self.kind}: {cls!r} is not a class")

        def decorate(rule: R) -> R:
            if cls in self._rules:
                raise InternalCompilerError(
                    f"{cls.__name__}: a {self.kind} rule is already registered "
                    f"({self._rules[cls].__module__}.{self._rules[cls].__qualname__})"
                )
            self._rules[cls] = rule
            return rule

        return decorate

    def lookup(self, cls: type) -> Callable[..., Any]:
        """The rule for exactly `cls`; UnsupportedError when there is none."""
        rule = self._rules.get(cls)
        if rule is None:
            raise UnsupportedError(f"{cls.__name__}: no {self.kind} rule is registered")
        return rule

    def has(self, cls: type) -> bool:
        return cls in self._rules

    def registered(self) -> tuple[type, ...]:
        """Every class with a rule, sorted by qualified name (for coverage tests)."""
        return tuple(sorted(self._rules, key=lambda c: f"{c.__module__}.{c.__qualname__}"))


TYPEINFER = Registry("typeinfer")
"""Node rules `rule(expr, ctx) -> Type` for Expr classes; op rules
`rule(op, arg_types, ctx) -> Type` for Op classes."""

CALLEE_TYPEINFER = Registry("callee typeinfer")
"""How a Call whose target is a callable Expr (a hir Function) types:
`rule(callee, arg_types, ctx) -> Type`. Separate from TYPEINFER because a Function is typed both as
a node of its own (its CallableType) and as a call target (by elaboration)."""

ACCESS_RELATION = Registry("access relation")
EVAL = Registry("eval")
EVAL_INTO = Registry("eval into")
"""An EVAL kernel that writes its result into a given array: `rule(op, args, out_type, out) ->
out | None`, where `out` has `out_type`'s shape and dtype, belongs to the evaluator, and may be one
of `args` (an intermediate read for the last time), so the rule must compute elementwise (read
each element before writing it, as a ufunc with `out=` does). The values written are exactly the
EVAL rule's, bit for bit; a rule that cannot promise that for these operands (a dtype it must
widen, say) returns None before writing anything and the evaluator runs the EVAL rule."""
STABLEHLO = Registry("stablehlo")

SHARDED_EVAL = Registry("sharded eval")
"""Per-device semantics for the few ops whose mesh execution is not "run the EVAL kernel on each
device's block of the iteration domain": `rule(op, args, call) -> value`, where `args` are the
evaluator's values and `call` is the evaluator's `ShardedCall` (its helpers run the default block
execution with a completion combiner, redistribute for Reshard, expose shards for Local, or map a
custom per-device function). Consulted only when a call touches a mesh; most ops register none."""

SPMD_LOWERING = Registry("spmd lowering")
"""The SPMD exit's counterpart of SHARDED_EVAL, for exactly the same ops:
`rule(op, operands, call) -> lowered`, where `operands` are the per-device values and `call` is
the exit's `SpmdCall`, whose helpers mirror the evaluator's `ShardedCall` (run the default block
lowering with a completion combiner, recall one branch, align an operand with the result's
blocks, run the op's StableHLO rule on local blocks, lower a Reshard's collectives, expose a
Local block), so a rule says on devices what the op's SHARDED_EVAL rule says on the simulator.
Every op with a SHARDED_EVAL rule has one (tests/exits/spmd/test_spmd_coverage.py); most ops
register neither."""

PALLAS = Registry("pallas")
"""The Pallas exit's per-CTA rule (DESIGN §2 exits/pallas): `rule(op, args, arg_types, out_type,
kx) -> array | tuple`, the op's ordinary semantics written with `kx.jnp` / `kx.lax` on one CTA's
LOCAL values (`arg_types`/`out_type` are the local plain types). `kx` carries jax's namespaces so
that op modules never import jax (DESIGN §5). Rules registered with `reads_refs=True` may receive
a kernel Ref (a gmem parameter's block) for an argument and read only the window they need
(`kx.window`); every other rule receives loaded arrays."""

PALLAS_REF_READERS: set[type] = set()
"""The op classes whose PALLAS rule takes kernel Refs unloaded (the windowed reads)."""

PALLAS_SHARDED = Registry("pallas sharded")
"""The Pallas exit's counterpart of SHARDED_EVAL / SPMD_LOWERING, for the same few ops:
`rule(op, args, call) -> value`, where `call` is the exit's `PallasCall` (run the default block
plan on this CTA, reshard between CTA-local layouts, pass a tuple field through). An op with a
SHARDED_EVAL rule and none of these fails closed at the Pallas exit when it touches the mesh."""

FUSION = Registry("fusion kind")
"""`rule(op) -> FusionKind`: the op's role for the fusion pass (SFEP-0053 §3.5): elementwise, a
view-like index map, a reduction or contraction root, or a barrier. Declared by each op module,
so the pass never inspects op classes."""

VALIDATION_SAMPLES = Registry("validation samples")
"""`rule() -> list[Sample]` (`rules.validation_samples`): the operands and attributes
the sharding-rule validator (`evaluator/validate.py`) checks the op's rules on. Built on demand, so
importing an op constructs no sample ops. An op with nothing to vary registers, through
`register_not_sampled`, a rule returning the reason as a `str` instead, so the validator's
coverage report can say why it is skipped."""

VJP = Registry("vjp")
"""Reverse-mode rules (DESIGN §4.18): `rule(call, cotangent, ad) -> tuple`, one entry per input
of the op, each None (no cotangent flows to that input: an index, a mask, a cache) or a thunk
`() -> Expr` that builds the input's cotangent contribution from `cotangent` (an Expr, or a tuple
of Expr | None for a tuple-valued op) with `ad`, the transform's builder (`ad.tf.<op>(...)` builds
typed Calls through the DSL's own surface builder, so every backward Call is typed by the
forward's rules). The transform calls only the thunks of the inputs it differentiates, so a rule
never builds dead code and may refuse one input (e.g. a cache) without refusing the op."""

VJP_TAKES_PENDING: set[type] = set()
"""The op classes whose VJP rule receives a cotangent with its pending Partial(sum)s still pending
(only Reshard, whose transpose is the identity on the global value: the completion then happens at
its input, in the input's own state, e.g. the transpose of an all-gather is one reduce-scatter).
Every other rule receives a completed cotangent (see `autodiff/reshard_policy.py`)."""

ZERO_COTANGENT = Registry("zero cotangent")
"""`rule() -> str`: the op's outputs carry no cotangent (integer, bool or shape results), with the
reason; the transform stops there, as JAX does for integer outputs."""

INDEX_RANGE = Registry("index range")
"""`rule(op, arg_types) -> {operand position: extent}`: the operands whose values index an axis
and must lie in [0, extent) (the evaluator refuses any other, `check_index_range`), so that
`tilefoundry run` draws a parameter passed there inside that range."""

_BY_KIND = {
    r.kind: r
    for r in (
        TYPEINFER,
        CALLEE_TYPEINFER,
        ACCESS_RELATION,
        EVAL,
        EVAL_INTO,
        STABLEHLO,
        SHARDED_EVAL,
        SPMD_LOWERING,
        PALLAS,
        PALLAS_SHARDED,
        FUSION,
        VALIDATION_SAMPLES,
        VJP,
        ZERO_COTANGENT,
        INDEX_RANGE,
    )
}

register_typeinfer = TYPEINFER.register
register_callee_typeinfer = CALLEE_TYPEINFER.register
register_access_relation = ACCESS_RELATION.register
register_eval = EVAL.register
register_eval_into = EVAL_INTO.register
register_stablehlo = STABLEHLO.register
register_sharded_eval = SHARDED_EVAL.register
register_spmd_lowering = SPMD_LOWERING.register
register_validation_samples = VALIDATION_SAMPLES.register
register_pallas_sharded = PALLAS_SHARDED.register
register_index_range = INDEX_RANGE.register


def register_vjp(cls: type, *, takes_pending: bool = False) -> Callable[[R], R]:
    """Decorator: the VJP rule of exactly `cls`; `takes_pending` lets it receive a pending
    cotangent (see VJP_TAKES_PENDING)."""
    if takes_pending:
        VJP_TAKES_PENDING.add(cls)
    return VJP.register(cls)


def register_zero_cotangent(cls: type, reason: str) -> None:
    """Declare that `cls`'s outputs carry no cotangent, and why (e.g. "a bool result")."""
    ZERO_COTANGENT.register(cls)(lambda: reason)


def register_pallas(cls: type, *, reads_refs: bool = False) -> Callable[[R], R]:
    """Decorator: the PALLAS rule of exactly `cls`; `reads_refs` lets it receive kernel Refs."""
    if reads_refs:
        PALLAS_REF_READERS.add(cls)
    return PALLAS.register(cls)


def register_fusion_kind(cls: type, kind: Any) -> None:
    """Declare `cls`'s fusion role; a kind that depends on attributes registers a rule instead."""
    FUSION.register(cls)(lambda op: kind)


def register_not_sampled(cls: type, reason: str) -> None:
    """Declare that `cls` has no validator samples, and why (e.g. no operand state to vary)."""
    VALIDATION_SAMPLES.register(cls)(lambda: reason)


def registered(kind: str | Registry) -> tuple[type, ...]:
    """The classes with a rule of `kind` ("typeinfer", "access relation", "eval", "stablehlo")."""
    if isinstance(kind, Registry):
        return kind.registered()
    if kind not in _BY_KIND:
        raise InternalCompilerError(
            f"registered: unknown rule kind {kind!r}; kinds: {list(_BY_KIND)}"
        )
    return _BY_KIND[kind].registered()
