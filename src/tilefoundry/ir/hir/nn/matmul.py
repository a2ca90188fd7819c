"""MatMul: torch `matmul` — batched, with torch's 1-D promotion and batch broadcasting.

Shapes (torch): `[.., M, K] @ [.., K, N] -> [broadcast(..), M, N]`; a 1-D lhs `[K]` acts as a
one-row matrix whose row axis is then dropped (`[K] @ [.., K, N] -> [.., N]`), a 1-D rhs `[K]` as a
one-column matrix whose column axis is dropped (`[.., M, K] @ [K] -> [.., M]`), and `[K] @ [K]` is
the scalar dot product. Operands share one dtype (no promotion); narrow floats accumulate in f32
and round once.

The relation is the shared contraction (domain `[batch.., M, N, K]`) when both operands have rank
>= 2. `contraction_relations` takes matrices only, so for a 1-D operand the dropped M or N is left
out of the domain altogether (a size-1 promoted axis would only be a reduction dim of extent 1):
`[K] @ [.., K, N]` iterates `[batch.., N, K]`, `[.., M, K] @ [K]` iterates `[batch.., M, K]`,
and `[K] @ [K]` iterates `[K]`. K is the last domain dim in every case, and it is a *partial*
reduction: a K split (on both operands along one mesh axis, or on one operand with the other
replicated and sliced locally, DESIGN §4.12) leaves Partial(sum) on that mesh axis.

Pending reductions (hir §1.3 nn): matmul is linear in one operand when the other is Broadcast /
replicated, so on each mesh axis one Partial(sum) passes; two Partials on one mesh axis (the
product of sums has cross terms), a non-sum Partial, and a Partial facing a Split of the other
operand on that mesh axis are rejected.
"""

from __future__ import annotations

import numpy as np

from tilefoundry.analysis.access_relation import broadcast_shapes, contraction_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    completion_remedy,
    compute_in_f32,
    mesh_axis_label,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import whole_axis_relations
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import ShardLayout, Split
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
from tilefoundry.sharding.shard_reading import pending_partials


class MatMul(Op):
    """torch.matmul."""

    lhs = ParamDef("input")
    rhs = ParamDef("input")


def _checked(op: MatMul, arg_types) -> tuple[TensorType, TensorType]:
    lhs, rhs = tensor_operands(op, arg_types)
    for name, type_ in (("lhs", lhs), ("rhs", rhs)):
        if type_.rank < 1:
            raise VerifyError(f"{op_name(op)}: operand '{name}' must have rank >= 1, got a scalar")
    dtype = same_dtype(op, [("lhs", lhs), ("rhs", rhs)])
    if dtype.is_bool:
        raise VerifyError(f"{op_name(op)}: operands must be numeric, got {dtype}")
    k_lhs, k_rhs = lhs.shape[-1], rhs.shape[0 if rhs.rank == 1 else -2]
    if k_lhs != k_rhs:
        raise VerifyError(
            f"{op_name(op)}: contraction extents differ: lhs {list(lhs.shape)} has K={k_lhs} "
            f"but rhs {list(rhs.shape)} has K={k_rhs}"
        )
    return lhs, rhs


def _batch(op: MatMul, lhs: TensorType, rhs: TensorType) -> tuple:
    try:
        return broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    except VerifyError:
        raise VerifyError(
            f"{op_name(op)}: batch dims {list(lhs.shape[:-2])} and {list(rhs.shape[:-2])} do not "
            "broadcast (torch semantics: right-aligned, size 1 or equal)"
        ) from None


def _out_shape(op: MatMul, lhs: TensorType, rhs: TensorType) -> tuple:
    if lhs.rank == 1:
        return rhs.shape[:-2] + rhs.shape[-1:] if rhs.rank >= 2 else ()
    if rhs.rank == 1:
        return lhs.shape[:-1]
    return (*_batch(op, lhs, rhs), lhs.shape[-2], rhs.shape[-1])


def _vector_relations(lhs_rank: int, rhs_rank: int):
    """The iteration space without the dropped axis of a 1-D operand; K is the last dim."""
    if lhs_rank == 1 and rhs_rank == 1:
        return whole_axis_relations(1, [(0,), (0,)], [()])
    matrix_rank = max(lhs_rank, rhs_rank)
    kept, k = tuple(range(matrix_rank - 1)), matrix_rank - 1  # [batch.., M or N], then K
    if lhs_rank == 1:
        rhs_reads = (*kept[:-1], k, kept[-1])
        return whole_axis_relations(matrix_rank, [(k,), rhs_reads], [kept])
    return whole_axis_relations(matrix_rank, [(*kept, k), (k,)], [kept])


@register_access_relation(MatMul)
def _relation(op, arg_types):
    lhs, rhs = _checked(op, arg_types)
    if lhs.rank >= 2 and rhs.rank >= 2:
        _batch(op, lhs, rhs)
        return contraction_relations(lhs.shape, rhs.shape)
    return _vector_relations(lhs.rank, rhs.rank)


def _refuse_partials(op: MatMul, lhs: TensorType, rhs: TensorType) -> None:
    """hir §1.3 nn: one Partial(sum) per mesh axis, facing a replicated operand."""
    operands = (("lhs", lhs), ("rhs", rhs))
    refuse_partials(
        op, operands, allowed=("sum",), why="matmul is linear (it commutes with a pending sum only)"
    )
    for (name, own), (other_name, other) in (operands, operands[::-1]):
        other_layout = other.layout
        for axis in pending_partials(own):
            label = mesh_axis_label(own.layout.mesh, axis)
            if axis in pending_partials(other):
                raise VerifyError(
                    f"{op_name(op)}: operands 'lhs' and 'rhs' both carry Partial(sum) on {label}; "
                    "matmul is linear in one operand at a time (a product of sums has cross "
                    f"terms); {completion_remedy('rhs', other_layout, axis)}"
                )
            facing_split = (
                isinstance(other_layout, ShardLayout)
                and other_layout.mesh == own.layout.mesh
                and isinstance(other_layout.attrs[axis], Split)
            )
            if facing_split:
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' carries Partial(sum) on {label} while "
                    f"'{other_name}' is Split on it; matmul carries a pending sum only against "
                    f"a replicated operand; {completion_remedy(name, own.layout, axis)}"
                )


@register_typeinfer(MatMul)
def _typeinfer(op, arg_types, ctx):
    lhs, rhs = _checked(op, arg_types)
    _refuse_partials(op, lhs, rhs)
    relations = _relation(op, (lhs, rhs))
    k = relations.domain_rank - 1
    out_shape = _out_shape(op, lhs, rhs)
    layout = propagate(
        op, (lhs, rhs), out_shape, relations=relations, partial_reduction_dims=frozenset({k})
    )
    return TensorType(out_shape, lhs.dtype, layout, result_storage(op, (lhs, rhs)))


@register_eval(MatMul)
def _eval(op, args, out_type):
    lhs, rhs = (np.asarray(a) for a in args)
    return compute_in_f32(np.matmul, out_type.dtype, lhs, rhs)


register_surface("matmul", MatMul)
register_fusion_kind(MatMul, FusionKind.CONTRACTION)


def _swap_last(ad, x):
    rank = x.type.rank
    return ad.tf.transpose(x, (*range(rank - 2), rank - 1, rank - 2))


def _as_matrix(ad, x, shape):
    return x if tuple(x.type.shape) == shape else ad.tf.reshape(x, shape)


@register_vjp(MatMul)
def _vjp(call, ct, ad):
    """torch matmul's transpose: a 1-D operand is the one-row (lhs) or one-column (rhs) matrix it
    acts as, batch broadcasting is summed back (`ad.sum_to`), and a rank-2 weight under a batched
    lhs (`x @ w`) contracts the batch and row axes together, so a split batch leaves the weight's
    cotangent a pending sum (DESIGN §4.18), never a per-batch intermediate."""
    tf = ad.tf
    lhs, rhs = call.args
    a_shape, b_shape = tuple(lhs.type.shape), tuple(rhs.type.shape)
    if len(a_shape) == 1 and len(b_shape) == 1:
        return lambda: tf.mul(ct, rhs), lambda: tf.mul(ct, lhs)
    a = _as_matrix(ad, lhs, (1, *a_shape)) if len(a_shape) == 1 else lhs
    b = _as_matrix(ad, rhs, (*b_shape, 1)) if len(b_shape) == 1 else rhs
    out_shape = (*tuple(ct.type.shape)[: max(a.type.rank, b.type.rank) - 2],)
    out_shape += (a.type.shape[-2], b.type.shape[-1])
    g = _as_matrix(ad, ct, out_shape)

    def d_lhs():
        da = ad.sum_to(tf.matmul(g, _swap_last(ad, b)), a.type.shape)
        return _as_matrix(ad, da, a_shape)

    def d_rhs():
        if b.type.rank == 2 and a.type.rank > 2 and not _splits_inner_rows(a, g):
            k, n = b.type.shape
            flat_a, flat_g = tf.reshape(a, (-1, k)), tf.reshape(g, (-1, n))
            db = tf.matmul(tf.transpose(flat_a, (1, 0)), flat_g)
        else:
            db = ad.sum_to(tf.matmul(_swap_last(ad, a), g), b.type.shape)
        return _as_matrix(ad, db, b_shape)

    return d_lhs, d_rhs


def _splits_inner_rows(*values) -> bool:
    """Whether merging the batch and row axes would make a Split an inner factor of the merged
    axis (a layout no exit reads): some axis after the first of them is split."""
    for value in values:
        rows = range(1, value.type.rank - 1)
        owners = split_owners(op_name(MatMul()), value.type).values()
        if any(axis in rows for axis, _, _ in owners):
            return True
    return False


@register_validation_samples(MatMul)
def _validation_samples() -> list[Sample]:
    return [
        Sample(MatMul(), (operand(4, 8), operand(8, 4))),
        Sample(MatMul(), (operand(4, 4, 8), operand(4, 8, 4)), "batched"),
        Sample(MatMul(), (operand(4, 4, 8), operand(8, 4)), "broadcast rhs", False),
    ]


def _dot(lhs: Value, rhs: Value, batch: int, contract: tuple[int, int], shape) -> Value:
    lw = lhs.lw
    out = TensorType(tuple(shape), lhs.dtype)
    name = lw.dot_general(
        lhs.name,
        rhs.name,
        batch=(range(batch), range(batch)),
        contract=([contract[0]], [contract[1]]),
        lhs_type=lhs.type,
        rhs_type=rhs.type,
        out_type=out,
    )
    return Value.of(lw, name, out)


@register_stablehlo(MatMul)
def _stablehlo(op, operands, arg_types, out_type, lw):
    """torch matmul as one dot_general: a 1-D operand contracts its only axis (so the dropped
    M/N never appears), a rank-2 rhs contracts against any lhs batch as it is, and otherwise both
    operands are broadcast to the common batch and batched. Narrow floats accumulate in f32."""
    lhs, rhs = (Value.of(lw, n, t).widened() for n, t in zip(operands, arg_types, strict=True))
    shape = lw.shape(out_type)
    if lhs.rank == 1 or rhs.rank <= 2:
        k_rhs = 0 if rhs.rank <= 2 else rhs.rank - 2
        result = _dot(lhs, rhs, 0, (lhs.rank - 1, k_rhs), shape)
    else:
        batch = shape[:-2]
        lhs = lhs.broadcast_to((*batch, *lhs.shape[-2:]))
        rhs = rhs.broadcast_to((*batch, *rhs.shape[-2:]))
        result = _dot(lhs, rhs, len(batch), (len(batch) + 1, len(batch)), shape)
    return result.convert(out_type.dtype).name


@register_pallas(MatMul)
def _pallas(op, args, arg_types, out_type, kx):
    """torch.matmul in jnp, accumulated in f32 (the reference kernel's `compute_in_f32`), at
    full f32 precision: the default lets a GPU round f32 operands to TF32 (Triton's default
    input precision), which the reference never does; HIGHEST is IEEE f32 there. On a GPU
    backend, a 1-D operand is the one-row / one-column matrix it acts as, and the matrices
    multiply as Triton takes them (`kx.matmul`)."""
    lhs, rhs = args
    jnp = kx.jnp
    highest = kx.lax.Precision.HIGHEST

    def product(a, b):
        accumulate = jnp.float32 if a.dtype.kind == "f" else None
        return jnp.matmul(a, b, precision=highest, preferred_element_type=accumulate)

    def on_gpu(a, b):
        matrices = kx.matmul(
            a.reshape((1, -1)) if a.ndim == 1 else a,
            b.reshape((-1, 1)) if b.ndim == 1 else b,
        )
        return matrices.reshape(out_type.shape)

    return kx.in_f32(on_gpu if kx.gpu else product, out_type.dtype, lhs, rhs)
