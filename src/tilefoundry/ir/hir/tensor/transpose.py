"""Transpose (hir tensor, consensus numpy.transpose): `out[j] = x[perm[j]]`.

A permutation moves every element to exactly one place, so the layout follows the relation
through the shared engine (Split positions travel with their logical axes) and every pending
Partial commutes with it: a reduction over devices of permuted addends is the permuted reduction.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    BoundaryRelation,
    identity_access,
    permutation_access,
)
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    normalize_axis,
    propagate,
    result_storage,
    tensor_operands,
)
from tilefoundry.ir.types import TensorType
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand


class Transpose(Op):
    """Permute the axes of `x`; `perm=None` reverses them (numpy's default)."""

    x = ParamDef("input")
    perm = ParamDef("attribute", tuple, optional=True)


def resolved_perm(op: Transpose, rank: int) -> tuple[int, ...]:
    """`perm` with negative axes normalised; it must name every axis exactly once."""
    if op.perm is None:
        return tuple(reversed(range(rank)))
    if len(op.perm) != rank:
        raise VerifyError(
            f"Transpose: perm {op.perm} has {len(op.perm)} entries but operand 'x' has rank "
            f"{rank}; give one entry per axis"
        )
    perm = tuple(normalize_axis(op, p, rank, "perm entry") for p in op.perm)
    if len(set(perm)) != rank:
        raise VerifyError(
            f"Transpose: perm {op.perm} is not a permutation of 0..{rank - 1}; every axis must "
            "appear exactly once"
        )
    return perm


@register_typeinfer(Transpose)
def _typeinfer(op: Transpose, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    perm = resolved_perm(op, x.rank)
    out_shape = tuple(x.shape[p] for p in perm)
    layout = propagate(op, arg_types, out_shape)
    return TensorType(out_shape, x.dtype, layout, result_storage(op, (x,)))


@register_access_relation(Transpose)
def _relation(op: Transpose, arg_types) -> AccessRelations:
    """Domain = output coordinates; the operand reads axis perm[j] at output coordinate j."""
    (x,) = tensor_operands(op, arg_types)
    perm = resolved_perm(op, x.rank)
    return AccessRelations(
        (BoundaryRelation(permutation_access(perm)),),
        (BoundaryRelation(identity_access(len(perm))),),
    )


@register_eval(Transpose)
def _eval(op: Transpose, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    return np.transpose(x, resolved_perm(op, x.ndim))


register_surface("transpose", Transpose)
register_fusion_kind(Transpose, FusionKind.VIEW)


@register_vjp(Transpose)
def _vjp(call, ct, ad):
    """The transpose of a permutation is its inverse."""
    perm = resolved_perm(call.target, call.args[0].type.rank)
    inverse = tuple(sorted(range(len(perm)), key=perm.__getitem__))
    return (lambda: ad.tf.transpose(ct, inverse),)


@register_validation_samples(Transpose)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Transpose(perm=(1, 0)), (operand(4, 8),), "2-D"),
        Sample(Transpose(perm=(2, 0, 1)), (operand(4, 4, 8),), "3-D"),
    ]


@register_stablehlo(Transpose)
def _stablehlo(op: Transpose, operands, arg_types, out_type, lw):
    perm = resolved_perm(op, arg_types[0].rank)
    return lw.transpose(operands[0], perm, arg_types[0], out_type)


@register_pallas(Transpose)
def _pallas(op: Transpose, args, arg_types, out_type, kx):
    (x,) = args
    return kx.jnp.transpose(x, resolved_perm(op, x.ndim))
