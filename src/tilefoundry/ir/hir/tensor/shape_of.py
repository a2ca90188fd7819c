"""ShapeOf and Rank (hir tensor, consensus torch/numpy `shape` / `ndim`): host shape metadata.

ShapeOf(x) is the rank-1 i64 tensor `[rank]` of x's logical extents; Rank(x) the rank-0 i64
scalar. Both are unmaterialised (`umat`, semantic-analysis §3.3: host shape metadata abstains
from storage anchoring) and unsharded: the logical shape does not depend on x's sharding or on
any pending reduction, so every ShardLayout is accepted and none is carried.

They read no element of x. Their relation says exactly that: x's boundary is the empty map (no
domain point reads any coordinate), so traffic and dependence analysis charge nothing for x. In
a kernel the shape is known when the kernel is built, so each is a constant there too.
"""

from __future__ import annotations

import islpy as isl
import numpy as np

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    AffineAccess,
    BoundaryRelation,
    identity_access,
)
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import tensor_operands
from tilefoundry.ir.types import StorageKind, TensorType, i64
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
    register_zero_cotangent,
)
from tilefoundry.rules.validation_samples import Sample, operand


class ShapeOf(Op):
    """The logical shape of `x` as a rank-1 i64 shape value."""

    x = ParamDef("input")


class Rank(Op):
    """The rank of `x` as a rank-0 i64 scalar."""

    x = ParamDef("input")


def _reads_nothing(domain_rank: int, operand_rank: int) -> AccessRelations:
    dims = ", ".join(f"d{i}" for i in range(domain_rank))
    coords = ", ".join(f"c{i}" for i in range(operand_rank))
    empty = AffineAccess(isl.Map(f"{{ [{dims}] -> [{coords}] : false }}"))
    return AccessRelations(
        (BoundaryRelation(empty),), (BoundaryRelation(identity_access(domain_rank)),)
    )


@register_typeinfer(ShapeOf)
def _shape_of_typeinfer(op: ShapeOf, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    return TensorType((x.rank,), i64, None, StorageKind.UMAT)


@register_typeinfer(Rank)
def _rank_typeinfer(op: Rank, arg_types, ctx) -> TensorType:
    tensor_operands(op, arg_types)
    return TensorType((), i64, None, StorageKind.UMAT)


@register_access_relation(ShapeOf)
def _shape_of_relation(op: ShapeOf, arg_types) -> AccessRelations:
    (x,) = tensor_operands(op, arg_types)
    return _reads_nothing(1, x.rank)


@register_access_relation(Rank)
def _rank_relation(op: Rank, arg_types) -> AccessRelations:
    (x,) = tensor_operands(op, arg_types)
    return _reads_nothing(0, x.rank)


@register_eval(ShapeOf)
def _shape_of_eval(op: ShapeOf, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    return np.array(x.shape, dtype=np.int64).reshape((x.ndim,))


@register_eval(Rank)
def _rank_eval(op: Rank, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    return np.array(x.ndim, dtype=np.int64)


@register_sharded_eval(ShapeOf)
def _shape_of_sharded_eval(op: ShapeOf, args, call) -> np.ndarray:
    """The global logical shape, one host value for every device: neither a Split (a device's
    block is smaller) nor a pending reduction changes it, and no element is read."""
    (x,) = args
    return np.array(x.shape, dtype=np.int64).reshape((len(x.shape),))


@register_sharded_eval(Rank)
def _rank_sharded_eval(op: Rank, args, call) -> np.ndarray:
    """The rank, as for ShapeOf: a host value independent of the sharding."""
    (x,) = args
    return np.array(len(x.shape), dtype=np.int64)


@register_spmd_lowering(ShapeOf)
def _shape_of_spmd_lowering(op: ShapeOf, operands, call):
    """The global logical shape as a constant on every device, as in the simulation (the
    ordinary rule would read the device's local block shape)."""
    shape = call.lw.shape(call.arg_types[0])
    return call.constant(np.array(shape, dtype=np.int64).reshape((len(shape),)))


@register_spmd_lowering(Rank)
def _rank_spmd_lowering(op: Rank, operands, call):
    """The rank as a constant on every device: independent of the sharding."""
    return call.constant(np.array(call.arg_types[0].rank, dtype=np.int64))


register_surface("shape_of", ShapeOf)
register_surface("rank", Rank)
register_fusion_kind(ShapeOf, FusionKind.BARRIER)
register_fusion_kind(Rank, FusionKind.BARRIER)
register_zero_cotangent(ShapeOf, "its result is integer shape metadata")
register_zero_cotangent(Rank, "its result is an integer")
register_validation_samples(ShapeOf)(lambda: [Sample(ShapeOf(), (operand(4, 8),))])
register_validation_samples(Rank)(lambda: [Sample(Rank(), (operand(4, 8),))])


@register_stablehlo(ShapeOf)
def _shape_of_stablehlo(op: ShapeOf, operands, arg_types, out_type, lw):
    """Shapes are static at this exit (DimVars bound per emission), so a shape is a constant."""
    shape = lw.shape(arg_types[0])
    return lw.constant(np.array(shape, dtype=np.int64).reshape(len(shape)), i64, (len(shape),))


@register_stablehlo(Rank)
def _rank_stablehlo(op: Rank, operands, arg_types, out_type, lw):
    return lw.constant(arg_types[0].rank, i64)


@register_pallas(ShapeOf)
def _shape_of_pallas(op: ShapeOf, args, arg_types, out_type, kx):
    """Off the cta mesh the operand's local type is its global one: its shape, as a constant."""
    return kx.vector(arg_types[0].shape, out_type.dtype)


@register_pallas(Rank)
def _rank_pallas(op: Rank, args, arg_types, out_type, kx):
    return kx.jnp.asarray(arg_types[0].rank).astype(kx.dtype(out_type.dtype))


@register_pallas_sharded(ShapeOf)
def _shape_of_pallas_sharded(op: ShapeOf, args, call):
    """The global logical shape in every CTA, as in the simulation (a CTA's block is smaller)."""
    return call.body.kx.vector(call.global_shape(0), i64)


@register_pallas_sharded(Rank)
def _rank_pallas_sharded(op: Rank, args, call):
    return call.body.kx.jnp.asarray(len(call.global_shape(0))).astype(call.body.kx.dtype(i64))
