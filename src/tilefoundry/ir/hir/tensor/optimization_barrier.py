"""OptimizationBarrier (hir tensor; StableHLO's `optimization_barrier`): the identity on a tuple
of tensors that no compiler may see through.

Its one argument is a tuple of tensors; its result is the tuple of the same types (sharding,
Partial states and storage unchanged: it computes nothing, so there is nothing to commute). The
point is what a compiler may not do across it: XLA neither merges a computation that reads the
results with one that reads the operands (common subexpression elimination) nor moves work
across it, and every result is available only once every operand is. The remat transform
(`autodiff/backward.py`) passes a checkpointed call's arguments and the arriving cotangent
through one, so the recomputed forward is a new computation that runs in the backward, after
the cotangent, instead of being merged back into the original forward.

The operand is a tuple, which has no coordinate space, so no affine boundary describes it
(`NO_AFFINE_RELATION`, as for TupleGetItem); each field's placement is carried as it is on every
exit. On a Pallas kernel, which XLA does not optimise across ops, it is the identity.
"""

from __future__ import annotations

from dataclasses import replace

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_pallas_sharded,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, TupleOperand, operand


class OptimizationBarrier(Op):
    """The tuple `values`, unchanged, as a value no optimisation looks through."""

    values = ParamDef("input")


@register_typeinfer(OptimizationBarrier)
def _typeinfer(op: OptimizationBarrier, arg_types, ctx) -> TupleType:
    (values,) = arg_types
    if not isinstance(values, TupleType) or not values.fields:
        raise VerifyError(
            f"OptimizationBarrier: operand 'values' must be a non-empty tuple of tensors, got "
            f"{values}; pass a tuple (a, b, ...) as the single argument"
        )
    for i, field in enumerate(values.fields):
        if not isinstance(field, TensorType):
            raise VerifyError(
                f"OptimizationBarrier: operand 'values[{i}]' must be a tensor, got {field}; "
                "pass a nested tuple's fields (tuple_get_item) instead"
            )
    return values


register_access_relation(OptimizationBarrier)(NO_AFFINE_RELATION)


@register_eval(OptimizationBarrier)
def _eval(op: OptimizationBarrier, args, out_type: Type):
    (values,) = args
    return tuple(values)


@register_sharded_eval(OptimizationBarrier)
def _sharded_eval(op: OptimizationBarrier, args, call):
    """The identity moves no data: each field keeps its per-device (or per-CTA) placement,
    addends too."""
    (values,) = args
    return tuple(values)


@register_spmd_lowering(OptimizationBarrier)
def _spmd_lowering(op: OptimizationBarrier, operands, call):
    """One barrier over every device's shares: each field keeps its shard (and Local view)."""
    (values,) = operands
    names = _barrier(call.lw, [v.name for v in values], [v.local for v in values])
    return tuple(replace(v, name=n) for v, n in zip(values, names, strict=True))


register_surface("optimization_barrier", OptimizationBarrier)
register_fusion_kind(OptimizationBarrier, FusionKind.BARRIER)


@register_vjp(OptimizationBarrier)
def _vjp(call, ct, ad):
    """The transpose of an identity is the identity; the cotangents that arrive pass through a
    barrier of their own, as JAX's transpose rule does, so the backward of a barriered region
    is not merged across it either. Fields that receive no cotangent stay without one (no
    zeros are built for them)."""

    def d_values():
        present = [i for i, part in enumerate(ct) if part is not None]
        if not present:
            return ct
        barrier = ad.tf.optimization_barrier(tuple(ct[i] for i in present))
        passed = {i: ad.tf.tuple_get_item(barrier, index=j) for j, i in enumerate(present)}
        return tuple(passed.get(i) for i in range(len(ct)))

    return (d_values,)


@register_validation_samples(OptimizationBarrier)
def _validation_samples() -> list[Sample]:
    return [
        Sample(OptimizationBarrier(), (TupleOperand((operand(4, 8), operand(8))),), "two"),
        Sample(OptimizationBarrier(), (TupleOperand((operand(4, 8),)),), "one", False),
    ]


def _barrier(lw, names: list[str], types: list[TensorType]) -> tuple[str, ...]:
    """`stablehlo.optimization_barrier` over `names` (generic form), one result per operand."""
    signature = ", ".join(lw.type(t) for t in types)
    text = f'"stablehlo.optimization_barrier"({", ".join(names)}) : ({signature}) -> ({signature})'
    results = lw.op(text, len(names))
    return (results,) if len(names) == 1 else results


@register_stablehlo(OptimizationBarrier)
def _stablehlo(op: OptimizationBarrier, operands, arg_types, out_type, lw):
    (names,) = operands
    return _barrier(lw, list(names), list(arg_types[0].fields))


@register_pallas(OptimizationBarrier)
def _pallas(op: OptimizationBarrier, args, arg_types, out_type, kx):
    """Inside one kernel the values are already registers or refs: nothing to keep apart."""
    (values,) = args
    return tuple(values)


register_pallas_sharded(OptimizationBarrier)(_sharded_eval)
