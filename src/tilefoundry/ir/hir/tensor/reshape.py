"""Reshape (hir tensor Reshape; DESIGN §4.7): a row-major relinearisation of the logical shape.

A reshape moves no data, so a ShardLayout survives it exactly when the new shape can be read as a
regrouping of the input's *layout positions* (shard §7.1.1): each position keeps its extent,
stride and mesh binding and only the logical axis it belongs to changes. The shared propagation
engine cannot see this (the relinearising access map is floor/mod, which it refuses), so the
rule is written here over the positions, with the seed's one extra case: the plain residual of a
Split-bound block (canonically, the position right after the Split-bound one: `16 @ x` is
`(4 S, 4)`) may divide once across a new-axis boundary. Deeper divides of a block, a divide that
regroups two Split-bound positions, and a divide of a Split-bound position fail closed.

One reading beyond the seed's letter: a position of a logical axis that no mesh axis splits holds
no device ownership, so it may divide freely (`(B @ x, H*D) -> (B, H, D)`); that only refines the
layout and moves no element between devices. `-1` (silent in the seed) is torch's: one axis.

One refusal beyond it (issue 28): on a device mesh, a merge that folds an unsplit axis over a split
one (`(4, 8 @ x) -> (32,)`) is refused here. Its result is split on an inner factor of the new axis,
a strided share per device, which the simulation holds but Shardy's shardings and the SPMD exit's
contiguous blocks cannot; refusing it when the program is checked keeps "what check accepts on a
device mesh runs there" (DESIGN §1) instead of a refusal in the middle of lowering. On other meshes
(warps, threads: simulated only) the view is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    BoundaryRelation,
    identity_access,
    linearized_view,
)
from tilefoundry.errors import EvalError, UnsupportedError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import mesh_axis_label, op_name, result_storage, tensor_operands
from tilefoundry.ir.types import TensorType, dim_floordiv, dim_mul, format_dim, normalize_dim
from tilefoundry.ir.types.shard import Broadcast, Dynamic, Layout, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten, is_int, is_value, same_value
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.ir.types.shard.shard_layout import split_positions
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
from tilefoundry.rules.validation_samples import Sample, operand
from tilefoundry.sharding.shard_reading import strided_split_on_devices
from tilefoundry.sharding.shard_regroup import logical_groups


def _check_new_shape(value: object) -> tuple:
    """Dims in normal form; one `-1` (torch/numpy inference) is allowed, nothing else negative."""
    if not isinstance(value, tuple):
        raise VerifyError(f"new_shape must be a tuple of dims, got {value!r}")
    dims = tuple(normalize_dim(d, what="new_shape entry") for d in value)
    if sum(1 for d in dims if is_value(d, -1)) > 1:
        raise VerifyError(f"new_shape {value!r} has more than one -1; at most one axis is inferred")
    negative = [d for d in dims if is_int(d) and d < -1]
    if negative:
        raise VerifyError(f"new_shape {value!r} has the negative extent {negative[0]}")
    return dims


class Reshape(Op):
    """Reshape `x` to `new_shape` (one entry may be -1, inferred from the element count)."""

    x = ParamDef("input")
    new_shape = ParamDef("attribute", tuple, validate=_check_new_shape)


def _size(shape) -> object:
    return reduce(dim_mul, shape, 1)


def _shape_text(shape) -> str:
    return "(" + ", ".join(format_dim(d) for d in shape) + ")"


def resolved_shape(op: Reshape, in_shape: tuple) -> tuple:
    """`new_shape` with its -1 inferred; its size must equal the input's in the dim normal form."""
    total = _size(in_shape)
    new_shape = op.new_shape
    if any(is_value(d, -1) for d in new_shape):
        known = _size(d for d in new_shape if not is_value(d, -1))
        if is_value(known, 0):
            raise VerifyError(
                f"Reshape: new_shape {_shape_text(new_shape)} infers its -1 axis next to a "
                "zero extent, which leaves it undetermined; write the extent explicitly"
            )
        if is_int(total) and is_int(known) and total % known:
            raise VerifyError(
                f"Reshape: cannot infer the -1 of new_shape {_shape_text(new_shape)}: operand "
                f"'x' of shape {_shape_text(in_shape)} has {total} elements, which the other "
                f"extents (product {known}) do not divide"
            )
        inferred = dim_floordiv(total, known)
        new_shape = tuple(inferred if is_value(d, -1) else d for d in new_shape)
    if not same_value(_size(new_shape), total):
        raise VerifyError(
            f"Reshape: new_shape {_shape_text(op.new_shape)} has {format_dim(_size(new_shape))} "
            f"elements but operand 'x' of shape {_shape_text(in_shape)} has {format_dim(total)}; "
            "size(new_shape) must equal size(x.shape)"
        )
    return new_shape


@dataclass(frozen=True)
class _Piece:
    """One output layout position: a whole input position, a part of a divided one, a merge of
    plain ones, or a fresh size-1 position for a size-1 new axis (`source` None)."""

    extent: object
    stride: object
    source: int | None
    part: str  # "whole" | "outer" | "inner" | "merged" | "unit"


class _NotAView(Exception):
    """Internal: the reshape regroups the positions in a way the seed does not support."""


def _regroup(pieces: list[_Piece], free: frozenset[int], new_shape: tuple) -> list[list[_Piece]]:
    """Per new axis, the run of layout pieces that forms it.

    A position of a logical axis no mesh axis splits (`free`) holds no device ownership, so
    dividing it only refines the layout; a position of a Split-bound block may divide once (the
    seed's second case, checked by `_check_block_divide`).
    """
    queue = list(pieces)
    runs: list[list[_Piece]] = []
    block_divided = False
    for target in new_shape:
        run: list[_Piece] = []
        product: object = 1
        while not is_value(target, 1) and not same_value(product, target):
            if not queue:
                raise _NotAView("the positions run out before the new axes do")
            piece = queue[0]
            grown = dim_mul(product, piece.extent)
            if _fits(grown, target):
                run.append(queue.pop(0))
                product = grown
                continue
            if piece.source not in free:
                if block_divided or piece.part != "whole":
                    raise _NotAView(
                        f"position {piece.source}, of a Split-bound block, would divide across "
                        "more than one new-axis boundary"
                    )
                block_divided = True
            outer, queue[0] = _divide(piece, product, target)
            run.append(outer)
            product = target
        runs.append(run or [_Piece(1, 0, None, "unit")])
    if runs and all(is_value(p.extent, 1) for p in queue):
        # Bound positions of extent 1 after the last one of extent > 1: outermost in the last
        # axis, where a Split is canonical (any place holds the same elements).
        runs[-1][:0] = queue
        queue = []
    if queue:
        raise _NotAView("positions are left over after the last new axis")
    return runs


def _fits(grown: object, target: object) -> bool:
    """Whether a run may take the whole next position (it may still grow to `target`)."""
    if is_int(grown) and is_int(target):
        return grown <= target and target % grown == 0
    return not (is_int(target) and not is_int(grown))


def _divide(piece: _Piece, product: object, target: object) -> tuple[_Piece, _Piece]:
    """Cut `piece` where the run reaches `target`: (outer part, inner remainder)."""
    if not (is_int(piece.extent) and is_int(product) and is_int(target)):
        raise _NotAView(f"position {piece.source} would divide across a symbolic boundary")
    if target % product or piece.extent % (target // product):
        raise _NotAView(f"position {piece.source} does not divide at a new-axis boundary")
    outer = target // product
    inner = piece.extent // outer
    outer_stride = None if piece.stride is None else piece.stride * inner
    return (
        _Piece(outer, outer_stride, piece.source, "outer"),
        _Piece(inner, piece.stride, piece.source, "inner"),
    )


def _check_block_divide(runs: list[list[_Piece]], bound: dict, free: frozenset[int]) -> None:
    """Seed: only the plain residual of one Split-bound position divides, and no second
    Split-bound position takes part in that regroup (its outer and inner new axes)."""
    for i, run in enumerate(runs):
        outer = next((p for p in run if p.part == "outer" and p.source not in free), None)
        if outer is None:
            continue
        p = outer.source
        inner_run = next(r for r in runs[i:] if any(q.part == "inner" and q.source == p for q in r))
        if p in bound:
            raise _NotAView(
                f"Split-bound position {p} would divide across a new-axis boundary; a position "
                "bound to a mesh axis keeps its mesh extent whole"
            )
        if p - 1 not in bound or run[-2:-1] != [_whole_of(run, p - 1)]:
            raise _NotAView(
                f"position {p} divides across a new-axis boundary but is not the plain residual "
                "right after a Split-bound position in the same new axis"
            )
        if sum(1 for q in run + inner_run if q.source in bound) != 1:
            raise _NotAView(
                f"the divide of position {p} regroups two Split-bound positions together"
            )


def _whole_of(run: list[_Piece], source: int) -> _Piece | None:
    return next((q for q in run if q.source == source and q.part == "whole"), None)


def _free_positions(x: TensorType, extents: tuple, bound: dict) -> frozenset[int]:
    """Positions of logical axes (canonical regroup, semantic-analysis §3.1) with no Split."""
    free: set[int] = set()
    for group in logical_groups(tuple(x.shape), extents):
        if group is not None and not any(k in bound for k in group):
            free.update(group)
    return frozenset(free)


def _coalesce(run: list[_Piece], bound: dict) -> list[_Piece]:
    """Merge neighbouring plain pieces of one run whose strides compose, so a merge of unsharded
    positions gives the canonical single residual position."""
    merged: list[_Piece] = []
    for piece in run:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and prev.source not in bound
            and piece.source not in bound
            and "unit" not in (prev.part, piece.part)
            and (
                prev.stride is None or same_value(prev.stride, dim_mul(piece.stride, piece.extent))
            )
        ):
            extent = dim_mul(prev.extent, piece.extent)
            merged[-1] = _Piece(extent, piece.stride, piece.source, "merged")
            continue
        merged.append(piece)
    return merged


def _output_layout(op: Reshape, x: TensorType, new_shape: tuple) -> ShardLayout | None:
    sl = x.layout
    if not isinstance(sl, ShardLayout) or all(isinstance(a, Broadcast) for a in sl.attrs):
        return None  # plain, or fully Broadcast: hir Reshape / DESIGN §4.7 give a plain output
    for axis, attr in enumerate(sl.attrs):
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"Reshape: operand 'x' is Dynamic on {mesh_axis_label(sl.mesh, axis)}; an "
                "unresolved distribution cannot be reshaped; insert reshard(x, ...) to Split or "
                "Broadcast first"
            )
    if not isinstance(sl.layout, Layout):
        raise _refusal(x, new_shape, "its layout is a composition, not a plain Layout")
    extents = tuple(flatten(sl.layout.shape))
    strides = None if sl.layout.stride is None else tuple(flatten(sl.layout.stride))
    bound = split_positions(sl)
    free = _free_positions(x, extents, bound)
    try:
        # A position of extent 1 is dropped, unless a mesh axis (of extent 1) splits it: that
        # Split must land on some new axis, as it would for a larger mesh (a one-device mesh
        # types the program as the same program on more devices).
        pieces = [
            _Piece(e, None if strides is None else strides[k], k, "whole")
            for k, e in enumerate(extents)
            if not is_value(e, 1) or k in bound
        ]
        runs = _regroup(pieces, free, new_shape)
        _check_block_divide(runs, bound, free)
    except _NotAView as why:
        raise _refusal(x, new_shape, str(why)) from None
    out = [piece for run in runs for piece in _coalesce(run, bound)]
    position_of = {p.source: i for i, p in enumerate(out) if p.source in bound}
    attrs = tuple(Split(position_of[a.axis]) if isinstance(a, Split) else a for a in sl.attrs)
    out_extents = tuple(p.extent for p in out)
    if strides is None:
        stride = None
    elif strides == c_order_strides(extents):
        stride = c_order_strides(out_extents)
    else:
        stride = tuple(p.stride for p in out)
    return ShardLayout(Layout(out_extents, stride), attrs, sl.mesh)


def _held_axes(sl: ShardLayout) -> str:
    """The mesh axes a Broadcast reshard would change: those `x` splits or holds Partial on."""
    return ", ".join(
        mesh_axis_label(sl.mesh, a)
        for a, attr in enumerate(sl.attrs)
        if not isinstance(attr, Broadcast)
    )


def _refusal(x: TensorType, new_shape: tuple, why: str) -> VerifyError:
    sl = x.layout
    return VerifyError(
        f"Reshape: {_shape_text(x.shape)} -> {_shape_text(new_shape)} of operand 'x' is not a "
        f"view over its layout positions {_shape_text(flatten(sl.layout.shape))} (hir Reshape: "
        f"{why}); insert reshard(x, ...) to Broadcast on {_held_axes(sl)} before the reshape"
    )


def _check_device_blocks(x: TensorType, out: TensorType) -> None:
    """On a device mesh every Split must stay an outermost factor of its axis (module doc)."""
    strided = strided_split_on_devices(out)
    if strided is None:
        return
    logical_axis, split = strided
    labels = ", ".join(mesh_axis_label(out.layout.mesh, m) for m in split.mesh_axes)
    raise VerifyError(
        f"Reshape: {_shape_text(x.shape)} -> {_shape_text(out.shape)} of operand 'x' folds an "
        f"unsplit axis over the split by {labels}, which becomes an inner factor of new axis "
        f"{logical_axis} (factors {_shape_text(split.factors)}): each device would hold a "
        "strided share, which the device exits cannot lay out; insert reshard(x, ...) to "
        f"Broadcast on {labels} before the reshape, or split the outer axis instead"
    )


@register_typeinfer(Reshape)
def _typeinfer(op: Reshape, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    new_shape = resolved_shape(op, x.shape)
    layout = _output_layout(op, x, new_shape)
    out = TensorType(new_shape, x.dtype, layout, result_storage(op, (x,)))
    _check_device_blocks(x, out)
    return out


@register_access_relation(Reshape)
def _relation(op: Reshape, arg_types) -> AccessRelations | None:
    """Row-major relinearisation; a regroup of symbolic extents has no affine form, so it
    registers no relation (traffic analysis then charges the whole tensors)."""
    (x,) = tensor_operands(op, arg_types)
    new_shape = resolved_shape(op, x.shape)
    try:
        view = linearized_view(new_shape, x.shape)
    except VerifyError:
        return None
    return AccessRelations(
        (BoundaryRelation(view),), (BoundaryRelation(identity_access(len(new_shape))),)
    )


@register_eval(Reshape)
def _eval(op: Reshape, args, out_type: TensorType) -> np.ndarray:
    (x,) = args
    symbolic = [d for d in out_type.shape if not is_int(d)]
    if len(symbolic) > 1:
        raise EvalError(
            f"{op_name(op)}: result shape {_shape_text(out_type.shape)} has several unresolved "
            "symbolic extents; bind the DimVars before evaluating"
        )
    shape = tuple(d if is_int(d) else -1 for d in out_type.shape)
    try:
        return np.reshape(x, shape)
    except ValueError as err:
        raise EvalError(f"{op_name(op)}: cannot reshape {x.shape} to {shape}: {err}") from None


def _check_local_reshape(call, in_shape: tuple[int, ...]) -> dict:
    """A reshape moves no data, so each device may reshape its own shard only when the claimed
    result layout gives every device, as its block, the very elements of its input block in the
    same row-major order. That is checked on the element numbering itself (no reasoning about
    positions) by both engines that run a reshape per device: the evaluator's `ShardedCall`
    and the SPMD exit's `SpmdCall` read blocks alike (`coords`, `block`). Any other claim fails
    closed: it would need a redistribution the op does not perform. Returns each device's
    result block shape."""
    numbering = np.arange(int(np.prod(in_shape, dtype=np.int64)))
    before, after = numbering.reshape(in_shape), numbering.reshape(call.out_shapes[0])
    shapes = {}
    for coord in call.coords:
        held, block = before[call.block(coord, 0)], after[call.block(coord)]
        shapes[coord] = block.shape
        if not np.array_equal(held.ravel(), block.ravel()):
            raise UnsupportedError(
                f"{call.where}: under the claimed result layout device {coord}'s block of "
                f"{list(call.out_shapes[0])} is not its input block of {list(in_shape)} "
                "relinearised, so no local reshape produces it; reshard x to Broadcast first"
            )
    return shapes


@register_sharded_eval(Reshape)
def _sharded_eval(op: Reshape, args, call):
    """Each device reshapes its own shard, when `_check_local_reshape` says that is exact."""
    (x,) = args
    blocks = _check_local_reshape(call, tuple(x.shape))
    return call.wrap({c: np.reshape(call.shard(x, c), blocks[c]) for c in call.coords})


@register_spmd_lowering(Reshape)
def _spmd_lowering(op: Reshape, operands, call):
    """On devices too each device reshapes its own block, under the same check: a head split
    `(b, s, h*d) -> (b, s, h, d)` of a Split h*d axis is a local `(b, s, h*d/n) -> (b, s,
    h/n, d)`, the Split moving to h; a merge back is the inverse. A per-device (Local) operand
    has no blocks: it is reshaped as it is."""
    (x,) = operands
    if not x.per_device:
        _check_local_reshape(call, call.lw.shape(x.type))
    return call.run_local((x,))


register_surface("reshape", Reshape)
register_fusion_kind(Reshape, FusionKind.VIEW)


@register_vjp(Reshape)
def _vjp(call, ct, ad):
    """A reshape moves no element, so its transpose reshapes the cotangent back."""
    return (lambda: ad.tf.reshape(ct, tuple(call.args[0].type.shape)),)


@register_validation_samples(Reshape)
def _validation_samples() -> list[Sample]:
    return [
        Sample(Reshape(new_shape=(32,)), (operand(4, 8),), "flatten"),
        Sample(Reshape(new_shape=(4, 2, 4)), (operand(4, 8),), "split last"),
        Sample(Reshape(new_shape=(8, 4)), (operand(4, 8),), "regroup", False),
    ]


@register_stablehlo(Reshape)
def _stablehlo(op: Reshape, operands, arg_types, out_type, lw):
    """Row-major relinearisation is exactly `stablehlo.reshape` on the logical shape."""
    return lw.reshape(operands[0], arg_types[0], out_type)


@register_pallas(Reshape)
def _pallas(op: Reshape, args, arg_types, out_type, kx):
    """Unsharded only (a sharded Reshape has SHARDED_EVAL semantics the exit refuses)."""
    (x,) = args
    return kx.jnp.reshape(x, out_type.shape)
