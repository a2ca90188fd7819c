"""RoPE(q, k, cos_cache, sin_cache, pos_ids) -> (q_rope, k_rope), the rotate-half form.

Shape contract (the seed leaves it to us; fixed here):
- q `[.., seq, head_dim]` and k `[.., seq, head_dim]`, rank >= 2 each; their leading axes are
  independent (e.g. different head counts), seq and head_dim are shared; head_dim is static and
  even (the rotation pairs `x[i]` with `x[i + head_dim/2]`).
- cos_cache and sin_cache `[max_pos, head_dim]`, one float dtype shared with q and k.
- pos_ids an integer `[seq]`, shared by every leading index (a per-batch `[batch, seq]` is not
  accepted: its broadcast against q's head axis is ambiguous, so it fails closed).

Element rule (HF `apply_rotary_pos_emb` / `rotate_half`): with `c = cos_cache[pos_ids]` and
`s = sin_cache[pos_ids]`, `out = x * c + rotate_half(x) * s` where
`rotate_half(x) = concat(-x[.., d/2:], x[.., :d/2])`; narrow floats in f32, rounded once.

Relation: head_dim is rotated within one op instance, so (as for the norms) it is a whole
existential range of the read and the write, never a domain dim; the caches are gathered at
data-dependent rows, so both of their axes are whole ranges too. The domain is
`[q leading.., k leading.., seq]`; pos_ids reads seq. Hence a Split of head_dim or of a cache
fails closed, and a Split of q's/k's leading or seq axes carries. Each branch keeps its input's
layout (hir §1.3), so a pos_ids Split must be matched by the branch's own seq split.

Pending reductions (hir §1.3 RoPE): the rotation is linear in q (resp. k) for fixed caches, so a
branch carries one Partial(sum) on its q or k when cos_cache, sin_cache and pos_ids are replicated
on that mesh axis. A non-sum Partial and any Partial on a cache or pos_ids are rejected, and so
are "multiple value-carrying Partials", read conservatively: q and k both carrying a Partial, on
the same mesh axis or not (one op instance runs both branches, so a device would hold an addend
of k next to a complete q under one call).
"""

from __future__ import annotations

import functools

import numpy as np

from tilefoundry.errors import EvalError, VerifyError
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
    tensor_operands,
)
from tilefoundry.ir.hir.whole_axis import (
    reads_except,
    refuse_splits_on,
    split_logical_axes,
    whole_axis_relations,
)
from tilefoundry.ir.lowering.values import Value, concatenate, gather
from tilefoundry.ir.types import TensorType, TupleType, is_static
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
from tilefoundry.rules.validation_samples import Sample, index_operand, operand
from tilefoundry.sharding.shard_reading import pending_partials


class RoPE(Op):
    """Rotary position embedding of q and k, rotate-half convention."""

    q = ParamDef("input")
    k = ParamDef("input")
    cos_cache = ParamDef("input")
    sin_cache = ParamDef("input")
    pos_ids = ParamDef("input")


def _checked(op: RoPE, arg_types) -> tuple[TensorType, ...]:
    q, k, cos, sin, pos = operands = tensor_operands(op, arg_types)
    name = op_name(op)
    for label, type_ in (("q", q), ("k", k)):
        if type_.rank < 2:
            raise VerifyError(
                f"{name}: operand '{label}' must be [.., seq, head_dim], got {list(type_.shape)}"
            )
    head_dim, seq = q.shape[-1], q.shape[-2]
    if not (is_static(head_dim) and head_dim % 2 == 0):
        raise VerifyError(f"{name}: head_dim must be static and even, got {head_dim}")
    if k.shape[-2:] != (seq, head_dim):
        raise VerifyError(
            f"{name}: 'k' must share q's [seq, head_dim] = {[seq, head_dim]}, got {list(k.shape)}"
        )
    for label, type_ in (("cos_cache", cos), ("sin_cache", sin)):
        if type_.rank != 2 or type_.shape[1] != head_dim:
            raise VerifyError(
                f"{name}: operand '{label}' must be [max_pos, {head_dim}], got {list(type_.shape)}"
            )
    if cos.shape != sin.shape:
        raise VerifyError(f"{name}: cos_cache {list(cos.shape)} and sin_cache differ in shape")
    if pos.rank != 1 or pos.shape[0] != seq or not pos.dtype.is_int:
        raise VerifyError(
            f"{name}: operand 'pos_ids' must be an integer [{seq}] (q's seq), got "
            f"{pos.dtype}{list(pos.shape)}"
        )
    dtype = same_dtype(op, [("q", q), ("k", k), ("cos_cache", cos), ("sin_cache", sin)])
    if not dtype.is_float:
        raise VerifyError(f"{name}: q, k and the caches must be float tensors, got {dtype}")
    return operands


@register_access_relation(RoPE)
def _relation(op, arg_types):
    q, k, *_ = _checked(op, arg_types)
    q_lead, k_lead = q.rank - 2, k.rank - 2
    seq = q_lead + k_lead
    q_reads = (*range(q_lead), seq, None)
    k_reads = (*range(q_lead, seq), seq, None)
    cache = (None, None)
    return whole_axis_relations(
        seq + 1, [q_reads, k_reads, cache, cache, (seq,)], [q_reads, k_reads]
    )


def _refuse_partials(op: RoPE, operands) -> None:
    q, k, cos, sin, pos = operands
    refuse_partials(
        op,
        [("cos_cache", cos), ("sin_cache", sin), ("pos_ids", pos)],
        why="rope gathers and multiplies by it, so no reduction commutes",
    )
    refuse_partials(
        op, [("q", q), ("k", k)], allowed=("sum",), why="rope is linear in q and in k (sum only)"
    )
    k_partials = sorted(pending_partials(k))
    if pending_partials(q) and k_partials:
        axis = k_partials[0]
        raise VerifyError(
            f"{op_name(op)}: 'q' and 'k' both carry a Partial(sum) (k on "
            f"{mesh_axis_label(k.layout.mesh, axis)}); hir §1.3 RoPE rejects multiple "
            f"value-carrying Partials; {completion_remedy('k', k.layout, axis)}"
        )
    pos_splits = split_logical_axes(op, "pos_ids", pos)
    for name, value in (("q", q), ("k", k)):
        facing = sorted(set(pending_partials(value)) & set(pos_splits))
        if facing and value.layout.mesh == pos.layout.mesh:
            label = mesh_axis_label(value.layout.mesh, facing[0])
            raise VerifyError(
                f"{op_name(op)}: '{name}' carries Partial(sum) on {label} while 'pos_ids' is "
                f"Split there; a branch carries a pending sum only when cos_cache, sin_cache and "
                f"pos_ids are replicated on that mesh axis; "
                f"{completion_remedy(name, value.layout, facing[0])}"
            )


def _branch(op: RoPE, name: str, value: TensorType, secondary) -> TensorType:
    """One branch keeps `value`'s type (hir §1.3), so a pos_ids Split must be one that `value`
    already has on its seq axis; the engine then checks the two agree factor for factor."""
    pos = secondary[-1]
    seq = value.rank - 2
    seq_splits = {a for a, axis in split_logical_axes(op, name, value).items() if axis == seq}
    for mesh_axis in split_logical_axes(op, "pos_ids", pos):
        if mesh_axis not in seq_splits:
            label = mesh_axis_label(pos.layout.mesh, mesh_axis)
            raise VerifyError(
                f"{op_name(op)}: operand 'pos_ids' is Split on {label} but '{name}' does not "
                f"split its seq axis there, and each branch keeps its input's layout; insert "
                f"reshard(pos_ids, ...) to Broadcast on {label}"
            )
    branch = (value, *secondary)
    reads = reads_except(value.rank, {value.rank - 1})
    cache = (None, None)
    view = whole_axis_relations(
        value.rank - 1, [reads, cache, cache, (seq,)], [reads], exists=False
    )
    names = (name, "cos_cache", "sin_cache", "pos_ids")
    propagate(op, branch, value.shape, relations=view, operands=names)
    return TensorType(value.shape, value.dtype, value.layout, result_storage(op, branch))


@register_typeinfer(RoPE)
def _typeinfer(op, arg_types, ctx):
    q, k, cos, sin, pos = operands = _checked(op, arg_types)
    _refuse_partials(op, operands)
    refuse_splits_on(
        op,
        [("q", q, {q.rank - 1}), ("k", k, {k.rank - 1})],
        "rope rotates head_dim halves into each other, so one op instance must see all of it",
    )
    refuse_splits_on(
        op,
        [("cos_cache", cos, {0, 1}), ("sin_cache", sin, {0, 1})],
        "rope gathers whole cache rows at data-dependent positions",
    )
    return TupleType((_branch(op, "q", q, (cos, sin, pos)), _branch(op, "k", k, (cos, sin, pos))))


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


@register_eval(RoPE)
def _eval(op, args, out_type):
    q, k, cos_cache, sin_cache, pos_ids = (np.asarray(a) for a in args)
    max_pos = cos_cache.shape[0]
    if pos_ids.size and not (pos_ids.min() >= 0 and pos_ids.max() < max_pos):
        raise EvalError(
            f"{op_name(op)}: pos_ids must lie in [0, {max_pos}) (the cache length), got values "
            f"in [{pos_ids.min()}, {pos_ids.max()}]"
        )
    cos, sin = cos_cache[pos_ids], sin_cache[pos_ids]
    q_type, k_type = out_type.fields
    return (
        compute_in_f32(_rotate, q_type.dtype, q, cos, sin),
        compute_in_f32(_rotate, k_type.dtype, k, cos, sin),
    )


@register_sharded_eval(RoPE)
def _sharded_eval(op, args, call):
    """Each branch runs as a call of its own, since one op instance would tie them together: a
    shared seq dim split by q's Split would cut a replicated k too, and q's Partial (typeinfer
    lets exactly one branch carry one) would be read into k_rope. RoPE has no one-branch form,
    so a branch is RoPE with that input as both q and k, told (`depends`) which argument each
    of its two identical results comes from; its first result is the branch. A branch that
    touches no mesh (HF-style GQA: the key branch plain beside a query split over `tp`) runs
    on the caller's mesh, every device computing it whole."""
    q, k, cos, sin, pos = args
    shared = tuple(call.arg_types[2:])
    results = []
    for index, x in enumerate((q, k)):
        x_type, field, shape = call.arg_types[index], call.out_fields[index], call.out_shapes[index]
        branch = call.recall(
            (x, x, cos, sin, pos),
            (x_type, x_type, *shared),
            TupleType((field, field)),
            (shape, shape),
        )
        results.append(branch.run_blocks(depends=((0, 2, 3, 4), (1, 2, 3, 4)))[0])
    return tuple(results)


@register_spmd_lowering(RoPE)
def _spmd_lowering(op, operands, call):
    """On devices each branch is the same call of its own as in the simulation: the SPMD
    exit's `SpmdCall` offers the same `recall` and `run_blocks(depends=)`, so both engines
    carry out one block plan per branch (and the duplicate branch is dead code XLA drops)."""
    return _sharded_eval(op, operands, call)


register_surface("rope", RoPE)
register_fusion_kind(RoPE, FusionKind.BARRIER)


def _transposed_sin(ad, sin):
    """The sin cache s' with RoPE(ct, cos, s') = the transpose of RoPE(x, cos, sin): the rotation
    R is antisymmetric (R^T = -R), and moving the elementwise sin across R swaps its halves, so
    s' = -concat(s[:, d/2:], s[:, :d/2])."""
    tf = ad.tf
    half = sin.type.shape[1] // 2
    swapped = tf.concat(
        (tf.slice(sin, (None, half), (None, None)), tf.slice(sin, (None, 0), (None, half))), axis=1
    )
    return tf.neg(swapped)


@register_vjp(RoPE)
def _vjp(call, ct, ad):
    """Both branches' cotangents come from one RoPE with the transposed sin cache. A cache's
    rows were gathered at pos_ids and multiplied elementwise, so its cotangent is
    scatter_add(zeros, pos_ids, r) with r[seq, d] the branches' products summed over their
    leading axes (ct·x for cos, ct·rotate_half(x) for sin), duplicate positions
    accumulating; pos_ids is an index, with no cotangent."""
    tf = ad.tf
    q, k, cos, sin, pos = call.args
    branches = tuple(zip(ct, (q, k), strict=True))

    @functools.cache
    def transposed():
        rows = (ad.zeros_like(x) if c is None else c for c, x in branches)
        return tf.rope(*rows, cos, _transposed_sin(ad, sin), pos)

    def branch(index):
        return lambda: tf.tuple_get_item(transposed(), index=index)

    def cache(table, factor):
        def d_table():
            rows = tuple(cos.type.shape[1:])
            per_row = [
                ad.sum_to(tf.mul(c, factor(x)), (pos.type.shape[0], *rows))
                for c, x in branches
                if c is not None
            ]
            total = per_row[0] if len(per_row) == 1 else _added(ad, *per_row)
            return _scatter_rows(ad, table, pos, total)

        return d_table

    return branch(0), branch(1), cache(cos, lambda x: x), cache(sin, _rotate_half(ad)), None


def _rotate_half(ad):
    """x -> concat(-x[.., d/2:], x[.., :d/2]) along the last axis, in HIR ops."""
    tf = ad.tf

    def rotate(x):
        half = x.type.shape[-1] // 2
        lead = (None,) * (x.type.rank - 1)
        upper = tf.slice(x, (*lead, half), (*lead, None))
        lower = tf.slice(x, (*lead, 0), (*lead, half))
        return tf.concat((tf.neg(upper), lower), axis=-1)

    return rotate


def _added(ad, q_rows, k_rows):
    """The two branches' rows summed: in their own states when add accepts them, else both
    replicated (q pending a sum where k is split, say)."""
    return ad.accepted(ad.tf.add, q_rows, k_rows)


def _scatter_rows(ad, table, pos, rows):
    """The rows added back into zeros of the cache at pos_ids, from replicated rows and
    positions where ScatterAdd refuses their own states (a split seq, for instance)."""
    zeros = ad.zeros_like(table)
    return ad.accepted(lambda p, r: ad.tf.scatter_add(zeros, p, r, axis=0), pos, rows)


@register_validation_samples(RoPE)
def _validation_samples() -> list[Sample]:
    q, k, table = operand(4, 4, 8), operand(4, 4, 8), operand(8, 8)
    return [Sample(RoPE(), (q, k, table, table, index_operand(4, bound=8)))]


def _rotate_value(x: Value, cos: Value, sin: Value) -> Value:
    half = x.shape[-1] // 2
    last = x.rank - 1
    halves = (-x.slice_axis(last, half, x.shape[-1]), x.slice_axis(last, 0, half))
    rotated = concatenate(halves, last)
    return x * cos.broadcast_to(x.shape) + rotated * sin.broadcast_to(x.shape)


@register_stablehlo(RoPE)
def _stablehlo(op, operands, arg_types, out_type, lw):
    """cos/sin rows gathered at pos_ids, rotate-half as two slices and a concatenate, each branch
    in f32 for narrow floats. An out-of-range position is an evaluation error in the reference;
    `stablehlo.gather` clamps it into the cache instead (undefined input here)."""
    q, k, cos_cache, sin_cache, pos = (
        Value.of(lw, n, t) for n, t in zip(operands, arg_types, strict=True)
    )
    cos, sin = (gather(cache, pos, 0).widened() for cache in (cos_cache, sin_cache))
    return tuple(_rotate_value(x.widened(), cos, sin).convert(x.dtype).name for x in (q, k))


@register_pallas(RoPE, reads_refs=True)
def _pallas(op, args, arg_types, out_type, kx):
    """The reference kernel: cos/sin rows at pos_ids (`kx.take`: a gather-load of a cache that
    is a gmem parameter), rotate-half as an equal split and a concat (no arithmetic on a GPU),
    each branch in f32. An out-of-range position cannot be reported from inside a kernel (the
    evaluator raises); the gather clamps it."""
    q, k, cos_cache, sin_cache, pos_ids = args
    q, k = kx.load(q), kx.load(k)
    cos, sin = kx.take(cos_cache, pos_ids, 0), kx.take(sin_cache, pos_ids, 0)

    def rotate(x, c, s):
        first, second = kx.jnp.split(x, 2, axis=-1)
        return x * c + kx.concat([-second, first], x.ndim - 1) * s

    q_type, k_type = out_type.fields
    return (
        kx.in_f32(rotate, q_type.dtype, q, cos, sin),
        kx.in_f32(rotate, k_type.dtype, k, cos, sin),
    )
