"""Zeros: allocate a zero-initialised tensor (hir §1.3 ir/hir/tensor Zeros).

It has no operands, so nothing to propagate: the result is a plain tensor of the attributes'
shape, dtype and storage, and its access relation is a lone identity output boundary.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, BoundaryRelation, identity_access
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import as_dtype, numpy_dtype, shape_attribute
from tilefoundry.ir.types import DType, StorageKind, TensorType, f8e8m0, format_dim
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_not_sampled,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_zero_cotangent,
)


def _storage_attribute(value: object) -> StorageKind:
    """Exactly the lowercase storage names, as everywhere else (no case-folding)."""
    storage = StorageKind.resolve(value)
    if storage is None:
        raise VerifyError("a storage kind is required (e.g. 'gmem', 'rmem')")
    return storage


def _dtype_attribute(value: object) -> DType:
    dtype = as_dtype(value)
    if dtype == f8e8m0:
        raise VerifyError(
            "f8e8m0 is an exponent-only scale format with no zero; allocate another dtype and "
            "cast, or fill with ones"
        )
    return dtype


class Zeros(Op):
    """Allocate a zero-initialised tensor; produces a Tensor."""

    shape = ParamDef("attribute", tuple, validate=shape_attribute)
    dtype = ParamDef("attribute", DType, validate=_dtype_attribute)
    storage = ParamDef("attribute", default=StorageKind.GMEM, validate=_storage_attribute)


@register_typeinfer(Zeros)
def _typeinfer(op: Zeros, arg_types, ctx) -> TensorType:
    return TensorType(op.shape, op.dtype, None, op.storage)


@register_access_relation(Zeros)
def _relation(op: Zeros, arg_types) -> AccessRelations:
    return AccessRelations((), (BoundaryRelation(identity_access(len(op.shape))),))


@register_eval(Zeros)
def _eval(op: Zeros, args, out_type: TensorType) -> np.ndarray:
    shape = out_type.shape
    if not all(isinstance(d, int) for d in shape):
        dims = ", ".join(format_dim(d) for d in shape)
        raise EvalError(f"Zeros: shape [{dims}] is symbolic at evaluation; bind its DimVars first")
    return np.zeros(shape, numpy_dtype(out_type.dtype))


register_surface("zeros", Zeros)
register_fusion_kind(Zeros, FusionKind.BARRIER)
register_zero_cotangent(Zeros, "zeros has no inputs")
register_not_sampled(Zeros, "it has no operand, so there is no input state to vary")


@register_stablehlo(Zeros)
def _stablehlo(op: Zeros, operands, arg_types, out_type, lw):
    return lw.constant(0, out_type.dtype, lw.shape(out_type))


@register_pallas(Zeros)
def _pallas(op: Zeros, args, arg_types, out_type, kx):
    return kx.jnp.zeros(out_type.shape, kx.dtype(out_type.dtype))
