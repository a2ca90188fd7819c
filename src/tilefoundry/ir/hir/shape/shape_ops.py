"""ShapeExtract and ShapeCompose (hir shape): between shape values and their per-axis dims.

A shape value is a rank-1 i64 tensor of static length (what ShapeOf and ShapeCompose produce); a
dim is a rank-0 i64 scalar. Both are host metadata: the results are unmaterialised (`umat`) and
unsharded. A shape value or dim that is genuinely sharded (a Split, or a pending Partial) is not
metadata any more, so either op fails closed on one rather than guess which shard holds the
extent.

ShapeExtract reads one element at a constant index, which its relation states. ShapeCompose's
operand is a tuple, which has no coordinate space, so it registers `NO_AFFINE_RELATION`.

In a kernel both are selections against an iota (a shape value may be runtime data there too),
which every GPU lowering has: neither slices nor concatenates a value.
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
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION, op_name, tensor_operands
from tilefoundry.ir.lowering.values import Value, concatenate
from tilefoundry.ir.types import StorageKind, TensorType, TupleType, i64
from tilefoundry.ir.types.shard import Broadcast, ShardLayout
from tilefoundry.ir.types.shard.int_tuple import is_int
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
    register_zero_cotangent,
)
from tilefoundry.rules.validation_samples import (
    Domain,
    Operand,
    Sample,
    TupleOperand,
    constant_operand,
)

_DIM = TensorType((), i64, None, StorageKind.UMAT)


class ShapeExtract(Op):
    """The extent at `index` of the shape value `shape` (negative counts from the end)."""

    shape = ParamDef("input")
    index = ParamDef("attribute", int)


class ShapeCompose(Op):
    """The shape value assembled, in order, from the tuple `dims` of rank-0 integer scalars."""

    dims = ParamDef("input")


def _refuse_sharded(op: Op, name: str, type_: TensorType) -> None:
    sl = type_.layout
    if isinstance(sl, ShardLayout) and any(not isinstance(a, Broadcast) for a in sl.attrs):
        raise VerifyError(
            f"{op_name(op)}: operand '{name}' carries the sharding {sl.attrs}, but shape "
            f"metadata is replicated; insert reshard({name}, ...) to Broadcast on every mesh "
            "axis first"
        )


def extract_position(op: ShapeExtract, shape: TensorType) -> int:
    """The checked, non-negative position of `index` in the shape value."""
    if shape.rank != 1 or shape.dtype != i64:
        raise VerifyError(
            f"ShapeExtract: operand 'shape' must be a shape value (a rank-1 i64 tensor), got "
            f"{shape}; build one with shape_of or shape_compose"
        )
    (length,) = shape.shape
    if not is_int(length):
        raise VerifyError(
            f"ShapeExtract: operand 'shape' has the symbolic length {length}; a shape value has "
            "a static length (its rank)"
        )
    if not -length <= op.index < length:
        raise VerifyError(
            f"ShapeExtract: index {op.index} is out of range for a shape value of rank {length} "
            f"(valid: {-length}..{length - 1})"
        )
    return op.index % length


@register_typeinfer(ShapeExtract)
def _extract_typeinfer(op: ShapeExtract, arg_types, ctx) -> TensorType:
    (shape,) = tensor_operands(op, arg_types)
    extract_position(op, shape)
    _refuse_sharded(op, "shape", shape)
    return _DIM


@register_access_relation(ShapeExtract)
def _extract_relation(op: ShapeExtract, arg_types) -> AccessRelations:
    """A rank-0 domain reading the one element at the extracted position."""
    (shape,) = tensor_operands(op, arg_types)
    read = AffineAccess(isl.Map(f"{{ [] -> [{extract_position(op, shape)}] }}"))
    return AccessRelations((BoundaryRelation(read),), (BoundaryRelation(identity_access(0)),))


@register_eval(ShapeExtract)
def _extract_eval(op: ShapeExtract, args, out_type: TensorType) -> np.ndarray:
    (shape,) = args
    if not -len(shape) <= op.index < len(shape):
        raise EvalError(
            f"ShapeExtract: index {op.index} is out of range for a shape value of {len(shape)}"
        )
    return np.array(shape[op.index], dtype=np.int64)


@register_typeinfer(ShapeCompose)
def _compose_typeinfer(op: ShapeCompose, arg_types, ctx) -> TensorType:
    (dims,) = arg_types
    if not isinstance(dims, TupleType):
        raise VerifyError(
            f"ShapeCompose: operand 'dims' must be a tuple of rank-0 integer scalars, got {dims}; "
            "pass Tuple((d0, d1, ...))"
        )
    for i, field in enumerate(dims.fields):
        if not (isinstance(field, TensorType) and field.rank == 0 and field.dtype.is_int):
            raise VerifyError(
                f"ShapeCompose: operand 'dims[{i}]' must be a rank-0 integer scalar, got {field}"
            )
        _refuse_sharded(op, f"dims[{i}]", field)
    return TensorType((len(dims.fields),), i64, None, StorageKind.UMAT)


register_access_relation(ShapeCompose)(NO_AFFINE_RELATION)


@register_eval(ShapeCompose)
def _compose_eval(op: ShapeCompose, args, out_type: TensorType) -> np.ndarray:
    (dims,) = args
    return np.array([np.asarray(d).item() for d in dims], dtype=np.int64).reshape((len(dims),))


register_surface("shape_extract", ShapeExtract)
register_surface("shape_compose", ShapeCompose)
register_fusion_kind(ShapeExtract, FusionKind.BARRIER)
register_fusion_kind(ShapeCompose, FusionKind.BARRIER)
register_zero_cotangent(ShapeExtract, "its result is an integer dim")
register_zero_cotangent(ShapeCompose, "its result is integer shape metadata")

register_validation_samples(ShapeCompose)(
    lambda: [Sample(ShapeCompose(), (TupleOperand((constant_operand(4), constant_operand(8))),))]
)
register_validation_samples(ShapeExtract)(
    lambda: [Sample(ShapeExtract(index=1), (Operand((4,), i64, Domain("constant", 4)),))]
)


@register_stablehlo(ShapeExtract)
def _extract_stablehlo(op: ShapeExtract, operands, arg_types, out_type, lw):
    """A shape value may be runtime data (composed from loop indices), so this is a slice."""
    shape = Value.of(lw, operands[0], arg_types[0])
    position = extract_position(op, arg_types[0])
    return shape.slice_axis(0, position, position + 1).reshape(()).name


@register_stablehlo(ShapeCompose)
def _compose_stablehlo(op: ShapeCompose, operands, arg_types, out_type, lw):
    dims = [
        Value.of(lw, n, t).convert(i64).reshape((1,))
        for n, t in zip(operands[0], arg_types[0].fields, strict=True)
    ]
    if not dims:
        return lw.constant(np.zeros((0,), np.int64), i64, (0,))
    return concatenate(dims, 0).name


@register_pallas(ShapeExtract)
def _extract_pallas(op: ShapeExtract, args, arg_types, out_type, kx):
    """The one element at the position, selected by a mask and summed (the others are 0)."""
    jnp = kx.jnp
    (shape,) = args
    position = extract_position(op, arg_types[0])
    at = kx.lax.broadcasted_iota(jnp.int32, shape.shape, 0) == position
    return jnp.sum(jnp.where(at, shape, jnp.zeros_like(shape)))


@register_pallas(ShapeCompose)
def _compose_pallas(op: ShapeCompose, args, arg_types, out_type, kx):
    """Each dim placed at its position by a mask (no concatenate of scalars)."""
    (dims,) = args
    return kx.vector(dims, out_type.dtype)
