"""LayerNorm and RMSNorm over the last axis, and the whole-axis relation they share with SoftMax.

Both normalise across the last axis: every output element depends on that axis's full mean (of
values, or of squares). hir §1.3 RMSNorm fixes how the relation says so: the normalised axis
"MUST stay inside a single op instance: it is never an iteration-domain axis of its own, only an
existential range that both the read and the write cover in full". So the iteration domain is
x's *other* axes, and x, weight, bias and the output read/write the normalised axis through a
free (existential) output variable: `{ [d0, d1] -> [d0, d1, w2] }`.

The shared propagation engine reads only single-valued maps, and such a map is not one. Its
answer is still well defined once no input is Split along a whole axis, which these ops refuse
first anyway (a device holding part of the axis cannot compute its mean): with that settled, the
engine is given the same maps with the free variable pinned to 0 (`shard view`), which binds no
domain dim, so every other axis propagates exactly as the registered relation says.

LayerNorm follows torch `layer_norm(x, normalized_shape=x.shape[-1:], weight, bias, eps)`: the
normalised shape is the last axis only, and the affine weight and bias are required inputs.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from functools import lru_cache

import islpy as isl
import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    compute_in_f32,
    mesh_axis_label,
    op_name,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.visitor_registry import (
    register_access_relation,
    register_eval,
    register_surface,
    register_typeinfer,
)
from tilefoundry.visitor_registry.access_relation import (
    AccessRelations,
    AffineAccess,
    BoundaryRelation,
)
from tilefoundry.visitor_registry.shard_regroup import logical_axis_of

# ---------------------------------------------------------------------------------------------
# Whole-axis helpers (shared with softmax.py, rope.py and conv2d.py; see the report: they would
# belong in op_support)

Reads = tuple[int | None, ...]
"""Per value axis, the domain dim it reads as a projection, or None for a whole (free) axis."""


@lru_cache(maxsize=1024)
def _row_access(domain_rank: int, reads: Reads, exists: bool) -> AffineAccess:
    dims = ", ".join(f"d{i}" for i in range(domain_rank))
    free = [f"w{i}" if exists else "0" for i in range(len(reads))]
    exprs = [free[i] if dim is None else f"d{dim}" for i, dim in enumerate(reads)]
    return AffineAccess(isl.Map(f"{{ [{dims}] -> [{', '.join(exprs)}] }}"))


def whole_axis_relations(
    domain_rank: int, inputs: Sequence[Reads], outputs: Sequence[Reads], *, exists: bool = True
) -> AccessRelations:
    """Boundaries whose None axes are covered in full by every domain point (`exists=True`, the
    registered relation), or pinned to 0 (`exists=False`, the engine's shard view)."""

    def boundary(reads: Reads) -> BoundaryRelation:
        return BoundaryRelation(_row_access(domain_rank, tuple(reads), exists))

    return AccessRelations(tuple(boundary(r) for r in inputs), tuple(boundary(r) for r in outputs))


def reads_except(rank: int, whole: Collection[int]) -> Reads:
    """Reads of a value whose `whole` axes are free and whose others are the domain, in order."""
    reads: list[int | None] = []
    next_dim = 0
    for axis in range(rank):
        if axis in whole:
            reads.append(None)
        else:
            reads.append(next_dim)
            next_dim += 1
    return tuple(reads)


def split_logical_axes(op: Op, name: str, type_: TensorType) -> dict[int, int]:
    """Mesh axis -> logical axis of every Split on operand `name` (empty when not sharded)."""
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        return {}
    index = type(op).inputs().index(name)
    layout_shape = flatten(layout.layout.shape)
    found = {}
    for mesh_axis, attr in enumerate(layout.attrs):
        if isinstance(attr, Split):
            label = mesh_axis_label(layout.mesh, mesh_axis)
            try:
                axis, _ = logical_axis_of(type_.shape, layout_shape, attr.axis, index, label)
            except VerifyError as err:
                raise VerifyError(f"{op_name(op)}: operand '{name}': {err.message}") from None
            found[mesh_axis] = axis
    return found


def refuse_splits_on(
    op: Op, operands: Iterable[tuple[str, TensorType, Collection[int]]], why: str
) -> None:
    """Refuse a Split along any listed logical axis of an operand; `why` says what that axis is."""
    for name, type_, axes in operands:
        for mesh_axis, axis in split_logical_axes(op, name, type_).items():
            if axis in axes:
                label = mesh_axis_label(type_.layout.mesh, mesh_axis)
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' is Split on {label} along axis {axis}, "
                    f"and {why}; insert reshard({name}, ...) to Broadcast on {label} first"
                )


def positive_eps(value: object) -> float:
    """eps is a finite, non-negative number (an int is widened)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VerifyError(f"eps must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise VerifyError(f"eps must be finite and non-negative, got {value!r}")
    return float(value)


# ---------------------------------------------------------------------------------------------
# The ops


class LayerNorm(Op):
    """(x - mean) / sqrt(var + eps) * weight + bias over x's last axis (biased variance)."""

    x = ParamDef("input")
    weight = ParamDef("input")
    bias = ParamDef("input")
    eps = ParamDef("attribute", float, default=1e-5, validate=positive_eps)


class RMSNorm(Op):
    """x / sqrt(mean(x ** 2) + eps) * weight over x's last axis."""

    x = ParamDef("input")
    weight = ParamDef("input")
    eps = ParamDef("attribute", float, default=1e-6, validate=positive_eps)


_NORMALISES = "{} normalises across the last axis (a non-monotonic combination of its values)"


def _check_operands(op: Op, arg_types) -> tuple[TensorType, ...]:
    """x has rank >= 1 and a float dtype; every affine input is rank-1 of x's last extent."""
    operands = tensor_operands(op, arg_types)
    x, *affine = operands
    names = type(op).inputs()
    if x.rank < 1:
        raise VerifyError(f"{op_name(op)}: operand 'x' must have rank >= 1, got a scalar")
    dtype = same_dtype(op, list(zip(names, operands, strict=True)))
    if not dtype.is_float:
        raise VerifyError(f"{op_name(op)}: operands must be float tensors, got {dtype}")
    for name, type_ in zip(names[1:], affine, strict=True):
        if type_.rank != 1 or type_.shape[0] != x.shape[-1]:
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' must be rank-1 of x's last extent "
                f"[{x.shape[-1]}], got shape {list(type_.shape)}"
            )
    return operands


def _relations(op, arg_types, *, exists: bool = True) -> AccessRelations:
    x, *affine = _check_operands(op, arg_types)
    last = x.rank - 1
    x_reads = reads_except(x.rank, {last})
    inputs = [x_reads] + [(None,)] * len(affine)
    return whole_axis_relations(last, inputs, [x_reads], exists=exists)


def _typeinfer(op, arg_types, ctx):
    operands = _check_operands(op, arg_types)
    x = operands[0]
    names = type(op).inputs()
    why = _NORMALISES.format(op_name(op))
    refuse_partials(op, zip(names, operands, strict=True), why=f"{why}, so no reduction commutes")
    last_axes = [{x.rank - 1}] + [{0}] * (len(operands) - 1)
    refuse_splits_on(
        op,
        zip(names, operands, last_axes, strict=True),
        f"{why}, so one op instance must see that whole axis",
    )
    layout = propagate(op, operands, x.shape, relations=_relations(op, operands, exists=False))
    return TensorType(x.shape, x.dtype, layout, result_storage(op, operands))


def _mean_last(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis; an empty axis gives 0 rather than 0/0 (there is nothing to
    normalise, and the result is empty anyway)."""
    return np.sum(values, axis=-1, keepdims=True) / max(values.shape[-1], 1)


def _layer_norm(eps: float):
    def kernel(x, weight, bias):
        centred = x - _mean_last(x)
        return centred / np.sqrt(_mean_last(centred * centred) + eps) * weight + bias

    return kernel


def _rms_norm(eps: float):
    def kernel(x, weight):
        return x / np.sqrt(_mean_last(x * x) + eps) * weight

    return kernel


_KERNELS = {LayerNorm: _layer_norm, RMSNorm: _rms_norm}


def _eval(op, args, out_type):
    kernel = _KERNELS[type(op)](op.eps)
    return compute_in_f32(kernel, out_type.dtype, *(np.asarray(a) for a in args))


for _cls, _name in ((LayerNorm, "layer_norm"), (RMSNorm, "rms_norm")):
    register_typeinfer(_cls)(_typeinfer)
    register_access_relation(_cls)(_relations)
    register_eval(_cls)(_eval)
    register_surface(_name, _cls)
