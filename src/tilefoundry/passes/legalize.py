"""legalize: make every implicit broadcast and scalar adoption explicit (DESIGN §4.10).

The DSL and HIR typeinfer accept torch broadcasting and let a Python float take the other
operand's float dtype; the tensor tier (SFEP-0053 §3.3) forbids both, so that the strict verifier,
fusion and every exit see only same-shape, same-dtype elementwise operands. For each elementwise
Call this pass

- replaces a rank-0 unmaterialised float literal whose dtype the op adopted by a Constant of the
  adopted dtype (same value, same source span), and
- wraps every operand the op's access relation reads through constant (broadcast) axes or with a
  lower rank in an explicit `BroadcastTo` to the result shape, spanned at the consuming expression.

Each implicit broadcast gets its own BroadcastTo, never a shared one: a broadcast is a view, and
sharing it would give it several consumers and so bar it from fusing into any of them.
Canonical ordering: the function is rebuilt in the one post-order every pass uses (graph.py), each
literal directly before its broadcast and each broadcast directly before its consumer, so the
printed result is stable. Operands are never swapped and no math is rewritten; a legalized Call
has exactly the type of the Call it replaces (anything else is an internal error).
"""

from __future__ import annotations

from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.analysis.access_relation import identity_access
from tilefoundry.errors import InternalCompilerError
from tilefoundry.ir.core import Call, Constant, Expr, SourceSpan, get_metadata
from tilefoundry.ir.types import DType, StorageKind, TensorType
from tilefoundry.passes.fusion_rules import fusion_kind, is_inlined_literal
from tilefoundry.passes.graph import Rebuilder, copy_call, typed_node
from tilefoundry.rules import ACCESS_RELATION, FusionKind, surface_entry


def implicitly_broadcast(call: Call) -> tuple[int, ...]:
    """The argument positions an elementwise Call reads through constant axes or a lower rank."""
    out = call.type
    if fusion_kind(call) != FusionKind.ELEMENTWISE or not isinstance(out, TensorType):
        return ()
    arg_types = tuple(a.type for a in call.args)
    relations = ACCESS_RELATION.lookup(type(call.target))(call.target, arg_types)
    identity = identity_access(out.rank).relation
    found = []
    for i, (arg_type, boundary) in enumerate(zip(arg_types, relations.inputs, strict=True)):
        if not isinstance(arg_type, TensorType):
            continue
        relation = boundary.pattern.relation
        if boundary.pattern.rank != out.rank or not relation.is_equal(identity):
            found.append(i)
    return tuple(found)


def adopted_literals(call: Call) -> dict[int, DType]:
    """Positions of float literals whose dtype differs from the op's (unique) float dtype."""
    if fusion_kind(call) != FusionKind.ELEMENTWISE:
        return {}
    values = [a.type.dtype for a in call.args if not is_inlined_literal(a)]
    floats = sorted({d for d in values if d.is_float}, key=lambda d: d.name)
    if len(floats) != 1:
        return {}
    return {
        i: floats[0]
        for i, a in enumerate(call.args)
        if is_inlined_literal(a) and a.type.dtype.is_float and a.type.dtype != floats[0]
    }


Plan = tuple[dict[int, DType], tuple[int, ...]]


def _plan(call: Call, plans: dict[tuple, Plan]) -> Plan:
    """`adopted_literals` and `implicitly_broadcast` of `call`, read once per signature in one
    run (`plans`): both read only the op, the operands' types and which operands are literals,
    and the result type, and every layer of a model repeats the same few."""
    if fusion_kind(call) != FusionKind.ELEMENTWISE:
        return {}, ()
    key = (
        call.target,
        tuple((a.type, is_inlined_literal(a)) for a in call.args),
        call.type,
    )
    try:
        plan = plans.get(key)
    except TypeError:  # an unhashable attribute or type: no memo
        return adopted_literals(call), implicitly_broadcast(call)
    if plan is None:
        plan = plans[key] = (adopted_literals(call), implicitly_broadcast(call))
    return plan


def _legalize_call(
    call: Call, args: tuple[Expr, ...], ctx: TypeInferContext, plans: dict[tuple, Plan]
) -> Expr:
    literals, broadcasts = _plan(call, plans)
    if not literals and not broadcasts:
        return copy_call(call, args, ctx)
    new_args = list(args)
    for i, dtype in literals.items():
        literal = args[i]
        typed = TensorType((), dtype, storage=StorageKind.UMAT)
        new_args[i] = typed_node(Constant(literal.value, typed, metadata=literal.metadata), ctx)
    span = get_metadata(call, SourceSpan)
    for i in broadcasts:
        widened = Call(
            explicit_broadcast(call.type.shape),
            (new_args[i],),
            metadata=() if span is None else (span,),
        )
        new_args[i] = typed_node(widened, ctx)
    new = typed_node(Call(call.target, tuple(new_args), metadata=call.metadata), ctx)
    if new.type != call.type:
        raise InternalCompilerError(
            f"legalize: making {type(call.target).__name__}'s operands explicit changed its type "
            f"from {call.type} to {new.type}"
        )
    return new


def legalize(obj: Any) -> Any:
    """The Function or Module with every implicit broadcast and scalar adoption made explicit."""
    plans: dict[tuple, Plan] = {}
    return Rebuilder(
        lambda call, args, ctx: _legalize_call(call, args, ctx, plans)
    ).module_or_function(obj)


def explicit_broadcast(shape: tuple) -> Any:
    """The op `tf.broadcast_to` names, found through the surface registry so this pass, like
    every engine, depends on registries rather than on an op module (DESIGN §2)."""
    entry = surface_entry("broadcast_to")
    if entry is None:
        raise InternalCompilerError("legalize: no op is registered as tf.broadcast_to")
    return entry.op_class(shape=shape, **entry.fixed)
