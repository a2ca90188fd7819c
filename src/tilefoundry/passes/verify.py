"""verify: the strict IR verifier run before and after every pass (SFEP-0053 §3.4, DESIGN §6).

Construction does not establish validity (a pass can build any DAG), so the verifier re-derives
everything from the IR alone: scoping, arities, type well-formedness, and — JAX `check_jaxpr`
style — every stamped type, by re-running typeinfer with a fresh context and comparing. The
`tensor` tier adds what legalize establishes: static dims only, and no implicit broadcast, dtype
promotion or layout change in elementwise ops. Every rejection is a VerifyError located at the
node's source span; the error also carries the node (`err.node`) so the pass manager can print the
IR around it when a pass, not the user, is to blame.
"""

from __future__ import annotations

from typing import Any, NoReturn

from tilefoundry.analysis import TypeInferContext, describe
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Module, Op, Tuple, Var, source_span
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.facts import body_order, free_vars, function_free_vars
from tilefoundry.ir.hir.signature import type_mismatch
from tilefoundry.ir.hir.walk import callees_first
from tilefoundry.ir.types import TensorType, TupleType, Type, UnitType, tensor_fields
from tilefoundry.ir.types.shard import Layout
from tilefoundry.passes.fusion_rules import fusion_kind
from tilefoundry.passes.legalize import adopted_literals
from tilefoundry.passes.region_check import check_region
from tilefoundry.rules import FusionKind

TIERS = ("hir", "tensor")
MAX_ELEMENTS = 2**62
"""The checked dimension range: an element count above it overflows 64-bit index arithmetic."""


def fail(node: Any, message: str) -> NoReturn:
    """Raise the located VerifyError for `node`, remembering the node for IR dumps."""
    err = VerifyError(message, location=source_span(node) if isinstance(node, Expr) else None)
    err.node = node
    raise err


def verify(obj: Any, *, tier: str = "hir", trusted: set[Any] | None = None) -> Any:
    """Check a Function or Module; returns it unchanged so calls can be chained.

    `trusted`, when given, is the set of nodes (and node signatures) already verified at this
    `tier` by an earlier call that was handed the same set: their per-node checks and type
    re-derivation are skipped and every node verified now is added to it. A node is immutable
    and its operands are part of it, so a node shared between a pass's input and its output is
    as valid as it was; a new node whose `signature` passed before passes again (a decoder's
    repeated layers, a pass's copy of a node whose operands were rebuilt); anything else a pass
    created is checked in full, and the whole-body checks (scoping, region ownership, the return
    type) always run. This is what makes "verify after every pass" cost little."""
    if tier not in TIERS:
        raise VerifyError(f"verify: tier must be one of {TIERS}, got {tier!r}")
    checker = _Verifier(tier, trusted)
    if isinstance(obj, Module):
        for fn in obj.functions:
            checker.function(fn)
    elif isinstance(obj, Function):
        checker.function(obj)
    else:
        raise VerifyError(f"verify: expected a Function or Module, got {type(obj).__name__}")
    return obj


class _Verifier:
    def __init__(self, tier: str, trusted: set[Any] | None = None):
        self.tier = tier
        self.done: set[Function] = set()
        self.trusted: set[Any] = set() if trusted is None else trusted
        self.remember = trusted is not None
        self.walks: dict[FusionRegion | None, list[Expr]] = {}
        """The post-order of the body being checked (key None) and of each region's outputs."""

    def function(self, fn: Function) -> None:
        """Check `fn` and every Function it calls, callees first (a chain of nested calls costs
        no recursion per level)."""
        if fn in self.done:
            return
        for each in callees_first(fn):
            if each not in self.done:
                self.done.add(each)
                self._function(each)

    def _function(self, fn: Function) -> None:
        where = f"Function {fn.name}"
        for param in fn.params:
            self.check_type(param, param.type, f"{where}: parameter '{param.name}'")
        self.check_type(fn, fn.return_type, f"{where}: the return type")
        for variant in fn.variants:
            self.function(variant)
        if fn.body is None:
            return
        nodes = self.ownership(fn)
        self.check_scopes(fn, nodes)
        fresh = [n for n in nodes if n not in self.trusted]
        unchecked, signatures = self.unchecked(fresh)
        for node in unchecked:
            self.node(node)
        self.rederive(unchecked, nodes)
        if self.remember:
            self.trusted.update(signatures)
        reason = type_mismatch(fn.return_type, fn.body.type)
        if reason is not None:
            fail(fn.body, f"{where}: the returned value does not match the return type: {reason}")
        if self.remember:
            self.trusted.update(fresh)

    def unchecked(self, fresh: list[Expr]) -> tuple[list[Expr], set[Signature]]:
        """The nodes of `fresh` whose per-node checks must run, and the signatures to remember
        once they pass. Without a trusted set (a plain `verify`, or debug mode) that is all of
        them; with one, a node whose signature passed before is skipped (see `signature`)."""
        if not self.remember:
            return fresh, set()
        unchecked: list[Expr] = []
        signatures: set[Signature] = set()
        for node in fresh:
            key = signature(node)
            if key is None:
                unchecked.append(node)
            elif key not in self.trusted and key not in signatures:
                unchecked.append(node)  # the first of its signature stands for the others
                signatures.add(key)
        return unchecked, signatures

    # ---- structure: who owns each node, and which Vars are in scope -----------------------------

    def ownership(self, fn: Function) -> list[Expr]:
        """Every node of the body and of its fusion regions; a non-literal node shared between a
        region body and anything outside it is a leak (or an undeclared input)."""
        owner: dict[Expr, FusionRegion | None] = {}
        order: list[Expr] = []
        pending: list[tuple[tuple[Expr, ...], FusionRegion | None]] = [((fn.body,), None)]
        self.walks = {}
        while pending:
            roots, region = pending.pop(0)
            walk = self.walks[region] = body_order(fn) if region is None else post_order(roots)
            for node in walk:
                if isinstance(node, Var | Constant):
                    order.append(node)
                    continue
                if node in owner:
                    if owner[node] is not region:
                        self.leak(node, owner[node], region)
                    continue
                owner[node] = region
                order.append(node)
                if isinstance(node, Call) and isinstance(node.target, FusionRegion):
                    pending.append((node.target.outputs, node.target))
        return order

    @staticmethod
    def leak(node: Expr, first: FusionRegion | None, second: FusionRegion | None) -> NoReturn:
        for region in (first, second):
            if region is not None and node in region.body:
                fail(
                    node,
                    f"FusionRegion: {describe(node)} is computed inside a fusion region but used "
                    "outside it without being declared as a region output",
                )
        fail(
            node,
            f"FusionRegion: the region body reads {describe(node)}, an outer value that is not "
            "passed in as a region input",
        )

    def check_scopes(self, fn: Function, nodes: list[Expr]) -> None:
        loop_vars = {
            var
            for node in nodes
            if isinstance(node, GridRegionExpr)
            for var in (node.induction_var, *node.carried_args)
        }
        for var in function_free_vars(fn):
            user = next(n for n in nodes if var in n.operands())
            if var in loop_vars:
                fail(
                    user,
                    f"{describe(user)}: uses Var '{var.name}' outside the loop that defines it "
                    "(use before definition)",
                )
            fail(
                user,
                f"{describe(user)}: uses foreign Var '{var.name}', which is neither a parameter "
                f"of Function {fn.name} nor a loop variable in scope",
            )
        for node in nodes:
            if isinstance(node, Call) and isinstance(node.target, FusionRegion):
                region = node.target
                stray = free_vars(region.outputs, region.inputs, self.walks[region])
                if stray:
                    names = ", ".join(sorted(v.name for v in stray))
                    fail(node, f"FusionRegion: the body reads Var(s) {names}, not region inputs")

    # ---- per node ----------------------------------------------------------------------------

    def node(self, node: Expr) -> None:
        what = describe(node)
        if node.type is None:
            fail(node, f"{what}: the node was never typed")
        if isinstance(node, Call) and isinstance(node.type, UnitType):
            fail(node, f"{what}: effect-form call (UnitType result); HIR and the tensor tier are "
                 "value-form")  # fmt: skip
        if not isinstance(node, Function | FusionRegion):
            self.check_type(node, node.type, what)
        if isinstance(node, Call):
            self.call(node, what)

    def call(self, call: Call, what: str) -> None:
        target = call.target
        if isinstance(target, Op):
            expected: tuple[Any, ...] = target.inputs()
        elif isinstance(target, Function):
            expected = tuple(p.name for p in target.params)
        elif isinstance(target, FusionRegion):
            expected = tuple(v.name for v in target.inputs)
        else:
            fail(call, f"{what}: a Call targets an Op, a Function or a FusionRegion")
        if len(call.args) != len(expected):
            fail(call, f"{what}: arity mismatch: {len(call.args)} argument(s) for "
                 f"{len(expected)} parameter(s) {expected}")  # fmt: skip
        if isinstance(target, Function):
            self.function(target)
            for param, arg in zip(target.params, call.args, strict=True):
                reason = type_mismatch(param.type, arg.type)
                if reason is not None:
                    fail(call, f"{what}: call signature mismatch at parameter '{param.name}': "
                         f"{reason}")  # fmt: skip
        if isinstance(target, FusionRegion):
            check_region(call, fail, self.walks.get(target))
        if self.tier == "tensor" and isinstance(target, Op):
            self.explicit_only(call, what)

    def explicit_only(self, call: Call, what: str) -> None:
        """Tensor tier: what legalize makes explicit must not reappear."""
        broadcast = _reshaped_operands(call)
        if broadcast:
            fail(call, f"{what}: implicit broadcast of operand {broadcast[0]} in the tensor "
                 "tier; legalize inserts broadcast_to")  # fmt: skip
        if adopted_literals(call):
            fail(call, f"{what}: implicit dtype promotion of a scalar literal in the tensor "
                 "tier; legalize writes a constant of the operand dtype")  # fmt: skip
        layouts = {str(a.type.layout) for a in call.args if _plain_layout(a.type)}
        if len(layouts) > 1 and fusion_kind(call) == FusionKind.ELEMENTWISE:
            fail(call, f"{what}: implicit layout change: operands carry different physical "
                 f"layouts {sorted(layouts)}; reshard one operand explicitly")  # fmt: skip

    def check_type(self, node: Any, type_: Type, what: str) -> None:
        if isinstance(type_, UnitType):
            return
        for tensor in tensor_fields(type_):
            count = 1
            for dim in tensor.shape:
                if not isinstance(dim, int):
                    if self.tier == "tensor":
                        fail(node, f"{what}: dynamic dimension {dim} in {tensor}; the tensor tier "
                             "needs static dimensions")  # fmt: skip
                    continue
                if dim <= 0 and self.tier == "tensor":
                    fail(node, f"{what}: dimension {dim} in {tensor} is not positive")
                count *= dim
            if count > MAX_ELEMENTS:
                fail(node, f"{what}: dimension-product overflow: {tensor} has {count} elements, "
                     f"more than the checked range 2**62")  # fmt: skip
            self.check_layout(node, tensor, what)

    def check_layout(self, node: Any, tensor: TensorType, what: str) -> None:
        if tensor.layout is None:
            return
        try:
            TensorType(tensor.shape, tensor.dtype, tensor.layout, tensor.storage)
        except VerifyError as err:
            fail(node, f"{what}: malformed layout: {err.message}")
        plain = isinstance(tensor.layout, Layout)
        if self.tier == "tensor" and plain and not _dense(tensor.layout):
            fail(node, f"{what}: malformed layout {tensor.layout} for the tensor tier: a "
                     "plain layout must be a dense permutation of the axes")  # fmt: skip

    # ---- typeinfer re-derivation ---------------------------------------------------------------

    def rederive(self, nodes: list[Expr], body: list[Expr]) -> None:
        """Re-run typeinfer on `nodes` and compare with their stamps. Every other node of the
        `body` is verified already (trusted, or its signature passed), so its stamped type is its
        rule's: re-derivation stops there, inside region bodies too."""
        ctx = TypeInferContext()
        checking = set(nodes)
        for node in body:
            if node not in checking and node.type is not None:
                ctx.assume(node, node.type)
        for node in nodes:
            if isinstance(node, Var | Constant):
                continue
            try:
                derived = ctx.infer(node)
            except VerifyError as err:
                fail(node, f"{describe(node)}: re-running typeinfer fails: {err.message}")
            stamped = node.type
            if _arity(stamped) != _arity(derived):
                fail(node, f"{describe(node)}: result arity mismatch: declared "
                     f"{_arity(stamped)} result(s) {stamped}, the rule gives "
                     f"{_arity(derived)} {derived}")  # fmt: skip
            if stamped != derived:
                fail(node, f"{describe(node)}: declared type {stamped} does not follow its rule, "
                     f"which gives {derived}")  # fmt: skip


def signature(node: Expr) -> Signature | None:
    """Everything the per-node checks and the type re-derivation of `node` read at one tier, or
    None when they read more (a Function or region callee, a loop, a literal array).

    Those checks are pure functions of the tier, the node's class, its op (attributes included),
    its stamped type and, per operand, the operand's stamped type and whether it is a literal (a
    re-derivation reads operand types only: an operand is checked before its users, so its
    stamped type is its rule's). Two nodes with one signature pass or fail together, so a
    decoder's repeated layers, and the copies legalize and fuse make of a node when only its
    operands' identities changed, are checked once. Only successes are remembered: a failure is
    raised afresh at its own node."""
    if isinstance(node, Call):
        target = node.target
        if not isinstance(target, Op):
            return None
        operands = node.args
    elif isinstance(node, Var | Constant):
        if isinstance(node, Constant) and not isinstance(node.value, int | float | bool):
            return None
        try:
            return Signature((type(node), node.type))
        except TypeError:
            return None
    elif isinstance(node, Tuple):
        target, operands = None, node.elements
    else:
        return None
    parts = []
    for operand in operands:
        if isinstance(operand, Constant):
            if not isinstance(operand.value, int | float | bool):
                return None
            parts.append((operand.type, type(operand.value), operand.value))
        else:
            parts.append(operand.type)
    try:
        return Signature((type(node), target, tuple(parts), node.type))
    except TypeError:  # an unhashable attribute or type
        return None


class Signature:
    """A node signature with its hash computed once: it is looked up and stored several times,
    and a tuple of types and an op re-hashes every element each time."""

    __slots__ = ("hash", "key")

    def __init__(self, key: tuple) -> None:
        self.hash = hash(key)
        self.key = key

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return type(other) is Signature and other.hash == self.hash and other.key == self.key


def _reshaped_operands(call: Call) -> tuple[int, ...]:
    """The positions of an elementwise call's tensor operands whose shape is not the result's:
    an implicit broadcast. Read off the shapes alone, not through legalize's access-relation
    reading, so the checker does not share a blind spot with the pass it checks (a same-rank
    broadcast such as f32[4,8] + f32[1,8] is one)."""
    out = call.type
    if fusion_kind(call) != FusionKind.ELEMENTWISE or not isinstance(out, TensorType):
        return ()
    return tuple(
        i
        for i, arg in enumerate(call.args)
        if isinstance(arg.type, TensorType) and tuple(arg.type.shape) != tuple(out.shape)
    )


def _arity(type_: Type) -> int:
    return len(type_.fields) if isinstance(type_, TupleType) else 1


def _plain_layout(type_: Any) -> bool:
    return isinstance(type_, TensorType) and isinstance(type_.layout, Layout)


def _dense(layout: Layout) -> bool:
    """A flat layout whose strides are the compact strides of some axis order (SFEP §3.2
    Dense{minor_to_major}); hierarchical modes are left to the exits."""
    shape, stride = layout.shape, layout.effective_stride
    if not isinstance(shape, tuple) or any(isinstance(s, tuple) for s in (*shape, *stride)):
        return True
    expected = 1
    for extent, step in sorted(zip(shape, stride, strict=True), key=lambda p: (p[1], p[0])):
        if extent != 1 and step != expected:
            return False
        expected *= extent
    return True
