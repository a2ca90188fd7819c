"""Concat and Stack (hir tensor, consensus numpy.concatenate / numpy.stack).

Both take ONE argument, a `Tuple` of tensors (the Call's single argument has a TupleType), of one
dtype and matching shapes (Concat: except on `axis`). Output storage anchors on every operand
(semantic-analysis §3.3).

Sharding: each output element is exactly one operand element, so along the non-joined axes the
layout follows the shared engine with one projection per operand (rule 6 makes the operands agree
on their Splits); the joined axis is where the operands sit side by side, so a Split on it would
need an owner boundary between operands and fails closed. A pending reduction commutes with the
selection only when every operand carries it: with Partial(r) on every operand, r over devices
of the joined addends is the joined value; a replicated operand next to a Partial one would be
counted once per device under a sum, so a Partial on some operands only is refused.

The single argument is a tuple, which has no coordinate space of its own, so no affine boundary
describes it: both ops register `NO_AFFINE_RELATION` (traffic analysis charges whole tensors).
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
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    completion_remedy,
    mesh_axis_label,
    normalize_axis,
    op_name,
    propagate,
    result_storage,
    same_dtype,
)
from tilefoundry.ir.lowering.values import Value, concatenate
from tilefoundry.ir.types import TensorType, TupleType, dim_add, format_dim
from tilefoundry.ir.types.shard import ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten, same_value
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, TupleOperand, operand
from tilefoundry.sharding.shard_reading import pending_partials
from tilefoundry.sharding.shard_regroup import logical_axis_of


class Concat(Op):
    """Join the tensors of the tuple `values` along an existing `axis`."""

    values = ParamDef("input")
    axis = ParamDef("attribute", int, default=0)


class Stack(Op):
    """Join the tensors of the tuple `values` along a new `axis` of extent len(values)."""

    values = ParamDef("input")
    axis = ParamDef("attribute", int, default=0)


def _operands(op: Op, arg_types) -> tuple[TensorType, ...]:
    (values,) = arg_types
    if not isinstance(values, TupleType) or not values.fields:
        raise VerifyError(
            f"{op_name(op)}: operand 'values' must be a non-empty tuple of tensors, got {values}; "
            "pass Tuple((a, b, ...)) as the single argument"
        )
    for i, field in enumerate(values.fields):
        if not isinstance(field, TensorType):
            raise VerifyError(
                f"{op_name(op)}: operand 'values[{i}]' must be a tensor, got the tuple {field}"
            )
    fields = values.fields
    same_dtype(op, [(f"values[{i}]", f) for i, f in enumerate(fields)])
    rank = fields[0].rank
    for i, field in enumerate(fields):
        if field.rank != rank:
            raise VerifyError(
                f"{op_name(op)}: operand 'values[{i}]' has rank {field.rank} but 'values[0]' "
                f"has rank {rank}; every operand has the same rank"
            )
    return fields


def _check_extents(op: Op, fields: tuple[TensorType, ...], skip: int | None) -> None:
    first = fields[0].shape
    for i, field in enumerate(fields[1:], start=1):
        for axis, (a, b) in enumerate(zip(first, field.shape, strict=True)):
            if axis != skip and not same_value(a, b):
                raise VerifyError(
                    f"{op_name(op)}: operand 'values[{i}]' has extent {format_dim(b)} on axis "
                    f"{axis} but 'values[0]' has {format_dim(a)}; shapes must match"
                    + (f" except on the concat axis {skip}" if skip is not None else "")
                )


def _check_partials(op: Op, fields: tuple[TensorType, ...]) -> None:
    """A Partial carries only when every operand holds the same one on that mesh axis."""
    states = [pending_partials(f) for f in fields]
    for i, state in enumerate(states):
        for axis, reduction in state.items():
            missing = next((j for j, s in enumerate(states) if s.get(axis) != reduction), None)
            if missing is not None:
                layout = fields[i].layout
                raise VerifyError(
                    f"{op_name(op)}: operand 'values[{i}]' carries Partial({reduction}) on "
                    f"{mesh_axis_label(layout.mesh, axis)} but 'values[{missing}]' does not, and "
                    f"joining pending addends with a complete value does not commute with "
                    f"{reduction}; {completion_remedy(f'values[{i}]', layout, axis)}"
                )


def _refuse_joined_splits(op: Op, fields: tuple[TensorType, ...], axis: int) -> None:
    for i, field in enumerate(fields):
        sl = field.layout
        if not isinstance(sl, ShardLayout):
            continue
        layout_shape = tuple(flatten(sl.layout.shape))
        for mesh_axis, attr in enumerate(sl.attrs):
            if not isinstance(attr, Split):
                continue
            label = mesh_axis_label(sl.mesh, mesh_axis)
            try:
                logical, _ = logical_axis_of(
                    field.shape, layout_shape, attr.axis, f"operand 'values[{i}]'", label
                )
            except VerifyError as err:
                raise VerifyError(f"{op_name(op)}: {err.message}") from None
            if logical == axis:
                raise VerifyError(
                    f"{op_name(op)}: operand 'values[{i}]' is Split on {label} along the concat "
                    f"axis {axis}; the operands' blocks do not line up with one owner boundary, "
                    f"so it fails closed; insert reshard(values[{i}], ...) to Broadcast on "
                    f"{label} first"
                )


def _per_operand_relations(out_rank: int, n: int, new_axis: int | None) -> AccessRelations:
    """For the engine only: each operand read by projection on the axes it shares with the
    output (the joined axis carries no Split, checked before, so its access form is moot)."""
    if new_axis is None:
        operand = identity_access(out_rank)
    else:
        kept = ", ".join(f"d{j}" for j in range(out_rank) if j != new_axis)
        dims = ", ".join(f"d{j}" for j in range(out_rank))
        operand = AffineAccess(isl.Map(f"{{ [{dims}] -> [{kept}] }}"))
    return AccessRelations(
        tuple(BoundaryRelation(operand) for _ in range(n)),
        (BoundaryRelation(identity_access(out_rank)),),
    )


def _joined_type(op: Op, fields, out_shape: tuple, new_axis: int | None) -> TensorType:
    _check_partials(op, fields)
    relations = _per_operand_relations(len(out_shape), len(fields), new_axis)
    names = [f"values[{i}]" for i in range(len(fields))]
    layout = propagate(op, fields, out_shape, relations=relations, operands=names)
    return TensorType(out_shape, fields[0].dtype, layout, result_storage(op, fields))


@register_typeinfer(Concat)
def _concat_typeinfer(op: Concat, arg_types, ctx) -> TensorType:
    fields = _operands(op, arg_types)
    rank = fields[0].rank
    if rank == 0:
        raise VerifyError(
            "Concat: the operands are rank-0 scalars, which have no axis to join; use stack"
        )
    axis = normalize_axis(op, op.axis, rank)
    _check_extents(op, fields, axis)
    _refuse_joined_splits(op, fields, axis)
    joined = fields[0].shape[axis]
    for field in fields[1:]:
        joined = dim_add(joined, field.shape[axis])
    out_shape = (*fields[0].shape[:axis], joined, *fields[0].shape[axis + 1 :])
    return _joined_type(op, fields, out_shape, None)


@register_typeinfer(Stack)
def _stack_typeinfer(op: Stack, arg_types, ctx) -> TensorType:
    fields = _operands(op, arg_types)
    axis = normalize_axis(op, op.axis, fields[0].rank + 1)
    _check_extents(op, fields, None)
    shape = fields[0].shape
    out_shape = (*shape[:axis], len(fields), *shape[axis:])
    return _joined_type(op, fields, out_shape, axis)


register_access_relation(Concat)(NO_AFFINE_RELATION)
register_access_relation(Stack)(NO_AFFINE_RELATION)


@register_eval(Concat)
def _concat_eval(op: Concat, args, out_type: TensorType) -> np.ndarray:
    (values,) = args
    return np.concatenate(tuple(values), axis=op.axis)


@register_eval(Stack)
def _stack_eval(op: Stack, args, out_type: TensorType) -> np.ndarray:
    (values,) = args
    return np.stack(tuple(values), axis=op.axis)


def _joined_sharded_eval(op: Op, values: tuple, call, axes: tuple[int | None, ...]):
    """Each device joins its blocks of the operands: operand axis `j` runs along result axis
    `axes[j]`, where a split operand's shard already is the result's block and a replicated
    one is sliced to it; the joined axis is never split (typeinfer refuses it, and `aligned`
    fails closed on it). Pending Partials stay addends, joined addend by addend."""
    kernel = _concat_eval if isinstance(op, Concat) else _stack_eval
    return call.wrap(
        {
            coord: kernel(op, (tuple(call.aligned(v, coord, axes) for v in values),), None)
            for coord in call.coords
        }
    )


@register_sharded_eval(Concat)
def _concat_sharded_eval(op: Concat, args, call):
    (values,) = args
    rank = len(values[0].shape)
    axis = op.axis % rank
    return _joined_sharded_eval(
        op, values, call, tuple(None if j == axis else j for j in range(rank))
    )


@register_sharded_eval(Stack)
def _stack_sharded_eval(op: Stack, args, call):
    (values,) = args
    rank = len(values[0].shape)
    axis = op.axis % (rank + 1)
    return _joined_sharded_eval(
        op, values, call, tuple(j if j < axis else j + 1 for j in range(rank))
    )


def _joined_spmd_lowering(values: tuple, call, axes: tuple[int | None, ...]):
    """On devices as in the simulation: each device joins its shares of the operands (cut
    locally to the result's blocks where replicated); the joined axis is never split."""
    return call.run_local((tuple(call.aligned(v, axes) for v in values),))


@register_spmd_lowering(Concat)
def _concat_spmd_lowering(op: Concat, operands, call):
    (values,) = operands
    rank = len(values[0].type.shape)
    axis = op.axis % rank
    return _joined_spmd_lowering(values, call, tuple(None if j == axis else j for j in range(rank)))


@register_spmd_lowering(Stack)
def _stack_spmd_lowering(op: Stack, operands, call):
    (values,) = operands
    rank = len(values[0].type.shape)
    axis = op.axis % (rank + 1)
    return _joined_spmd_lowering(values, call, tuple(j if j < axis else j + 1 for j in range(rank)))


register_surface("concat", Concat)
register_surface("stack", Stack)
register_fusion_kind(Concat, FusionKind.BARRIER)
register_fusion_kind(Stack, FusionKind.BARRIER)


def _pieces(ct, ad, fields, axis: int, stacked: bool):
    """The cotangent of each joined operand: its window of `ct` along the joined axis."""
    pieces, start = [], 0
    for field in fields:
        extent = 1 if stacked else field.shape[axis]
        leading = (None,) * axis
        squeeze = (axis,) if stacked else ()
        pieces.append(
            ad.tf.slice(ct, (*leading, start), (*leading, start + extent), squeeze_axes=squeeze)
        )
        start += extent
    return tuple(pieces)


def _joined_vjp(call, ct, ad):
    """Joining moves each element, so each operand's cotangent is its window of the result's."""
    fields = call.args[0].type.fields
    stacked = isinstance(call.target, Stack)
    axis = normalize_axis(call.target, call.target.axis, fields[0].rank + int(stacked))
    return (lambda: _pieces(ct, ad, fields, axis, stacked),)


register_vjp(Concat)(_joined_vjp)
register_vjp(Stack)(_joined_vjp)


@register_validation_samples(Concat)
def _concat_samples() -> list[Sample]:
    values = (TupleOperand((operand(4, 8), operand(4, 8))),)
    return [
        Sample(Concat(axis=0), values, "axis 0"),
        Sample(Concat(axis=1), values, "axis 1", False),
    ]


register_validation_samples(Stack)(
    lambda: [Sample(Stack(axis=0), (TupleOperand((operand(4, 8), operand(4, 8))),))]
)


def _values(operands, arg_types, lw) -> list[Value]:
    return [Value.of(lw, n, t) for n, t in zip(operands[0], arg_types[0].fields, strict=True)]


@register_stablehlo(Concat)
def _concat_stablehlo(op: Concat, operands, arg_types, out_type, lw):
    values = _values(operands, arg_types, lw)
    return concatenate(values, normalize_axis(op, op.axis, values[0].rank)).name


@register_stablehlo(Stack)
def _stack_stablehlo(op: Stack, operands, arg_types, out_type, lw):
    """Each operand gains a size-1 axis (a reshape), then they are concatenated along it."""
    values = _values(operands, arg_types, lw)
    axis = normalize_axis(op, op.axis, values[0].rank + 1)
    grown = [v.reshape((*v.shape[:axis], 1, *v.shape[axis:])) for v in values]
    return concatenate(grown, axis).name


@register_pallas(Concat)
def _concat_pallas(op: Concat, args, arg_types, out_type, kx):
    (values,) = args
    return kx.concat(values, op.axis % values[0].ndim)


@register_pallas(Stack)
def _stack_pallas(op: Stack, args, arg_types, out_type, kx):
    (values,) = args
    return kx.stack(values, op.axis % (values[0].ndim + 1))
