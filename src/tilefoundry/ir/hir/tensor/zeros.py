"""Zeros: allocate a zero-initialised tensor (hir §1.3 ir/hir/tensor Zeros).

It has no operands, so nothing to propagate: the result is a tensor of the attributes' shape,
dtype and storage, plain unless `layout=` places it, and its access relation is a lone identity
output boundary.

`layout=` may name any Split / Broadcast / Partial state (beyond the seed, issue 26): each
device holds its block of the zero tensor (Split), a replica (Broadcast) or an addend of zeros
(Partial). Zeros are a valid pending value of every reduction (the sum, max and min of zeros are
zero), so `tf.zeros(shape, dtype, layout=<Partial(sum)>)` is the pending zero a loop carry of
pending gradients starts from: a Reshard can never create a Partial, this op can, because it
knows every addend. `python -m tilefoundry.evaluator.validate --op Zeros` checks each state on
the simulated devices.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, BoundaryRelation, identity_access
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import as_dtype, mesh_axis_label, numpy_dtype, shape_attribute
from tilefoundry.ir.types import (
    DType,
    StorageKind,
    TensorType,
    f8e8m0,
    f32,
    format_dim,
    make_shard_tensor_type,
    normalize_dim,
)
from tilefoundry.ir.types.shard import (
    B,
    Dynamic,
    Layout,
    Mesh,
    P,
    S,
    ShardLayout,
    shared_strides,
    with_strides,
)
from tilefoundry.ir.types.shard.int_tuple import product
from tilefoundry.ir.types.shard.shard_layout import REDUCTIONS
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
from tilefoundry.rules.validation_samples import Sample


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
    layout = ParamDef("attribute", ShardLayout, optional=True)


def _placed(op: Zeros) -> ShardLayout:
    """The `layout=` attribute checked against the shape, strides materialised C-order over the
    global shape (a Reshard's same-storage default) when the target leaves them None."""
    target = op.layout
    layout_size, tensor_size = product(target.shape), product(op.shape)
    if layout_size is None or normalize_dim(layout_size) != normalize_dim(tensor_size):
        raise VerifyError(
            f"Zeros: the layout {target.layout} has size {layout_size} but the shape "
            f"{list(op.shape)} has size {tensor_size}; give a layout over exactly the shape"
        )
    for mesh_axis, attr in enumerate(target.attrs):
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"Zeros: the layout is Dynamic on {mesh_axis_label(target.mesh, mesh_axis)}; "
                "a new tensor's distribution is known, so name Split(k), Broadcast or Partial"
            )
    if not isinstance(target.layout, Layout) or target.layout.stride is not None:
        return target
    return with_strides(target, shared_strides(target))


@register_typeinfer(Zeros)
def _typeinfer(op: Zeros, arg_types, ctx) -> TensorType:
    layout = None if op.layout is None else _placed(op)
    return TensorType(op.shape, op.dtype, layout, op.storage)


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


@register_sharded_eval(Zeros)
def _sharded_eval(op: Zeros, args, call):
    """Every device holds zeros of its own share: a block (Split), a replica (Broadcast) or an
    addend (Partial); nothing is computed whole and cut, nothing is communicated."""
    whole = np.zeros(call.out_shapes[0], numpy_dtype(call.out_type.dtype))
    return call.map_devices(lambda coord, _: whole[call.block(coord)])


@register_spmd_lowering(Zeros)
def _spmd_lowering(op: Zeros, operands, call):
    """Each device's share is a zero constant of its local shape (the StableHLO rule on the
    local result type)."""
    return call.run_local(())


@register_pallas_sharded(Zeros)
def _pallas_sharded(op: Zeros, args, call):
    """A CTA's block of zeros (a Partial over CTAs is refused before this rule runs)."""
    return call.run_blocks()


register_surface("zeros", Zeros)
register_fusion_kind(Zeros, FusionKind.BARRIER)
register_zero_cotangent(Zeros, "zeros has no inputs")


def _zeros_on(first: object, last: object = B) -> Callable[[Mesh], Zeros]:
    """Zeros placed on the mesh under test (so the op is built per mesh, as Reshard's target):
    `first` on mesh axis 0, `last` on the last one, Broadcast in between."""

    def build(mesh: Mesh) -> Zeros:
        attrs = (first,) if mesh.rank == 1 else (first, *(B,) * (mesh.rank - 2), last)
        layout = make_shard_tensor_type((8, 8), f32, mesh=mesh, attrs=attrs).layout
        return Zeros(shape=(8, 8), dtype=f32, layout=layout)

    return build


@register_validation_samples(Zeros)
def _validation_samples() -> list[Sample]:
    """With no operand there is no input state to vary: each sample is one result state, and
    the check is that the devices' shares complete (gathered, or reduced by the claimed
    reduction) to the unsharded zeros."""
    return [
        Sample(_zeros_on(B), (), "Broadcast"),
        Sample(_zeros_on(S(0), S(1)), (), "S0, S1"),
        Sample(_zeros_on(S(1), S(0)), (), "S1, S0"),
        *(Sample(_zeros_on(P(r), S(0)), (), f"P({r}), S0") for r in REDUCTIONS),
        Sample(_zeros_on(S(1), P("sum")), (), "S1, P(sum)"),
    ]


@register_stablehlo(Zeros)
def _stablehlo(op: Zeros, operands, arg_types, out_type, lw):
    return lw.constant(0, out_type.dtype, lw.shape(out_type))


@register_pallas(Zeros)
def _pallas(op: Zeros, args, arg_types, out_type, kx):
    return kx.jnp.zeros(out_type.shape, kx.dtype(out_type.dtype))
