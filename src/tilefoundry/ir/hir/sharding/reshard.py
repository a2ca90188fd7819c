"""Reshard: the one explicit op that changes a value's layout, mesh or storage (hir §1.3).

Typing is the seed's (layout, storage) table, exactly (DESIGN §4.15): no layout keeps x's, and
a storage change must name one. What matters most is the strides it materialises: a sugar target
(strides None, on a ShardLayout's Layout or a plain `Layout(shape)` for a value on no mesh)
takes its physical form from the storage direction (rmem < smem < gmem): moving up to a shared
level lays every instance out in one C-order buffer, moving down gives each instance its own
compact engine; verbose strides are the user's (e.g. an MMA fragment) and are never rewritten.
After this rule no layout it returns has un-materialised strides.

The target's shape must factor x's logical shape axis by axis (shard §7.4, DESIGN §4.17): the
same element count grouped another way is a reshape, which this op would silently ignore.

Pending reductions: a Reshard may *complete* a Partial (to Broadcast, or scatter it to a Split —
the collective runs here), or keep it unchanged (a layout-only change), but it can never *create*
one: a replicated or split value has no per-device addends to reduce.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, BoundaryRelation, identity_access
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import mesh_axis_label, op_name, split_owners, tensor_operands
from tilefoundry.ir.lowering.mlir_text import is_on_one_device
from tilefoundry.ir.types import (
    StorageKind,
    TensorType,
    f32,
    make_shard_tensor_type,
    normalize_dim,
    storage_level,
)
from tilefoundry.ir.types.shard import (
    B,
    Dynamic,
    Layout,
    LayoutBase,
    Mesh,
    Partial,
    S,
    ShardLayout,
    Split,
    per_instance_strides,
    shared_strides,
    with_strides,
)
from tilefoundry.ir.types.shard.int_tuple import flatten, is_int, product, unflatten
from tilefoundry.ir.types.shard.mesh import c_order_strides
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
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand
from tilefoundry.sharding.mesh_views import refine
from tilefoundry.sharding.shard_reading import strided_split_on_devices
from tilefoundry.sharding.shard_regroup import logical_groups

__all__ = ["Reshard", "needs_grid_fence"]


def _target_kind(layout: object) -> LayoutBase:
    """hir Reshard: the supplied layout is a ShardLayout; a plain Layout is the seed's sugar for
    a value on no mesh (DESIGN §4.15)."""
    if not isinstance(layout, ShardLayout | Layout):
        raise VerifyError(
            f"must be a ShardLayout (or a plain Layout(shape) for a value on no mesh), got "
            f"{type(layout).__name__} {layout!r}"
        )
    return layout


class Reshard(Op):
    """Convert `x` to a target layout and/or storage; the logical shape never changes."""

    x = ParamDef("input")
    layout = ParamDef("attribute", LayoutBase, optional=True, validate=_target_kind)
    storage = ParamDef("attribute", StorageKind, optional=True)


def _is_cta_mesh(layout: object) -> bool:
    return isinstance(layout, ShardLayout) and any(t.name == "cta" for t in layout.mesh.topologies)


def needs_grid_fence(x_type: TensorType, out_type: TensorType) -> bool:
    """Whether lowering this Reshard must emit a grid barrier first (hir Reshard, cross-CTA fence).

    It must when it reads a gmem shard that CTAs of a cta mesh wrote under an ownership the
    result no longer has (another mesh, or another logical block per mesh axis). Replicated
    sources count as owned by every CTA, so any change to a Split needs the fence too; an extra
    barrier is only slower, a missing one is a race.
    """
    if x_type.storage != StorageKind.GMEM or not _is_cta_mesh(x_type.layout):
        return False
    if not isinstance(out_type.layout, ShardLayout):
        return True
    if out_type.layout.mesh != x_type.layout.mesh:
        return True
    who = "Reshard"
    return split_owners(who, x_type) != split_owners(who, out_type)


def _check_value_states(op: Op, x: TensorType, target: ShardLayout) -> None:
    """A Reshard completes or keeps a Partial; it never creates or changes one (see module doc)."""
    source = x.layout if isinstance(x.layout, ShardLayout) else None
    same_mesh = source is not None and source.mesh == target.mesh
    for mesh_axis, attr in enumerate(target.attrs):
        label = mesh_axis_label(target.mesh, mesh_axis)
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"{op_name(op)}: the target layout is Dynamic on {label}; a Reshard resolves a "
                "distribution, so name Split(k) or Broadcast there"
            )
        if not isinstance(attr, Partial):
            continue
        held = source.attrs[mesh_axis] if same_mesh else None
        if held != attr:
            raise VerifyError(
                f"{op_name(op)}: the target layout is Partial({attr.reduction}) on {label} but "
                f"x is {held if held is not None else 'not sharded on that mesh'} there; a "
                "Reshard can complete or keep a pending reduction, never create or change one; "
                "target Broadcast or Split on that mesh axis"
            )
    if source is not None and not same_mesh:
        for mesh_axis, attr in enumerate(source.attrs):
            if isinstance(attr, Partial):
                raise VerifyError(
                    f"{op_name(op)}: x carries Partial({attr.reduction}) on "
                    f"{mesh_axis_label(source.mesh, mesh_axis)} and the target is on another "
                    "mesh; complete it on its own mesh first: insert reshard(x, ...) to "
                    f"Broadcast on {mesh_axis_label(source.mesh, mesh_axis)}"
                )


def _check_one_device_set(op: Op, x: TensorType, target: ShardLayout) -> None:
    """A Reshard moves a value between views of one device set (`mesh_views`: meshes whose
    axes nest); the simulator and the SPMD exit move values only there, so another mesh is
    refused at check time, naming both, not when the program first runs."""
    source = x.layout.mesh if isinstance(x.layout, ShardLayout) else None
    if source is None or source == target.mesh:
        return
    try:
        refine([source, target.mesh], op_name(op), "a Reshard")
    except UnsupportedError as err:
        raise VerifyError(err.message) from None


def _check_shape(op: Op, x: TensorType, target: LayoutBase) -> None:
    """seed shard §7.4: a Reshard keeps the logical shape, so the target layout must spell it:
    the same size, and every logical axis factored into consecutive layout positions (canonical
    regroup, semantic-analysis §3.1, with no position shared by two axes)."""
    layout_size, tensor_size = product(target.shape), product(x.shape)
    if layout_size is None or normalize_dim(layout_size) != normalize_dim(tensor_size):
        raise VerifyError(
            f"{op_name(op)}: the target layout {_shown(target)} has size {layout_size} but x "
            f"{list(x.shape)} has size {tensor_size}; a Reshard preserves the logical shape, "
            "use reshape to change it"
        )
    layout_shape = tuple(flatten(target.shape))
    if None in logical_groups(tuple(x.shape), layout_shape):
        raise VerifyError(
            f"{op_name(op)}: the target layout's shape {layout_shape} does not factor x's "
            f"logical shape {tuple(x.shape)} axis by axis; a Reshard preserves the logical shape "
            "(shard §7.4), so a layout of another shape would be silently ignored: reshape x to "
            f"that shape first, or give the target a shape that splits each axis of "
            f"{tuple(x.shape)} into consecutive factors"
        )


def _shown(layout: LayoutBase) -> object:
    return layout.layout if isinstance(layout, ShardLayout) else layout


def _split_strides_all_zero(layout: object) -> bool:
    if not isinstance(layout, ShardLayout) or not isinstance(layout.layout, Layout):
        return False
    stride = layout.layout.stride
    splits = [a.axis for a in layout.attrs if isinstance(a, Split)]
    if stride is None or not splits:
        return False
    flat = flatten(stride)
    return all(flat[k] == 0 for k in splits)


def _sugar_strides(op: Op, x: TensorType, target: LayoutBase, storage: StorageKind) -> tuple:
    """The seed's stride table for a sugar target (strides None)."""
    if storage == x.storage:
        if _split_strides_all_zero(x.layout):
            return per_instance_strides(target)
        return shared_strides(target)
    try:
        upward = storage_level(x.storage) < storage_level(storage)
    except VerifyError as err:
        raise VerifyError(
            f"{op_name(op)}: cannot choose strides for {x.storage} -> {storage}: {err.message}; "
            "give the target layout explicit strides"
        ) from None
    return shared_strides(target) if upward else per_instance_strides(target)


def _check_device_blocks(op: Op, x: TensorType, target: ShardLayout) -> None:
    """On a device mesh each Split must be an outermost factor of its logical axis: an inner one
    gives each device a strided share, which the SPMD exit cannot lay out, so it is refused when
    the program is checked rather than while it is lowered (DESIGN §1)."""
    strided = strided_split_on_devices(TensorType(x.shape, x.dtype, target))
    if strided is None:
        return
    logical_axis, split = strided
    labels = ", ".join(mesh_axis_label(target.mesh, m) for m in split.mesh_axes)
    raise VerifyError(
        f"{op_name(op)}: the target layout {target.layout} splits logical axis {logical_axis} "
        f"of x {list(x.shape)} by {labels} on an inner factor (factors {split.factors}): each "
        "device would hold a strided share, which the device exits cannot lay out; split the "
        "outermost factors of the axis (the canonical layout, as N @ m.a sugar writes it)"
    )


def _target_layout(op: Op, x: TensorType, storage: StorageKind) -> ShardLayout:
    target = op.layout
    _check_shape(op, x, target)
    _check_value_states(op, x, target)
    _check_one_device_set(op, x, target)
    _check_device_blocks(op, x, target)
    if not isinstance(target.layout, Layout) or target.layout.stride is not None:
        return target
    try:
        return with_strides(target, _sugar_strides(op, x, target, storage))
    except VerifyError as err:
        raise VerifyError(f"{op_name(op)}: {err.message}") from None


def _plain_target(op: Op, x: TensorType, storage: StorageKind) -> Layout | None:
    """A plain `Layout` target: the value stays on no mesh, only its strides are chosen. Strides
    that come out C-order are the plain value's own (None: signature binding materialises C-order,
    DESIGN §4.2), so a staged value keeps the type of an unstaged one where nothing moved."""
    target = op.layout
    if isinstance(x.layout, ShardLayout):
        raise VerifyError(
            f"{op_name(op)}: x is sharded over {x.layout.mesh!r} and the target is the plain "
            f"{target}, which names no mesh; give a ShardLayout target instead: x's own with "
            f"strides None to restage it (ShardLayout(Layout({x.layout.shape!r}), "
            f"{x.layout.attrs!r}, mesh)), or Broadcast on every mesh axis to gather it"
        )
    _check_shape(op, x, target)
    try:
        if target.stride is None:
            strides = _sugar_strides(op, x, target, storage)
            target = Layout(target.shape, unflatten(strides, target.shape))
        TensorType(x.shape, x.dtype, target, storage)  # types §2: mode by mode, injective
    except VerifyError as err:
        raise VerifyError(f"{op_name(op)}: {err.message}") from None
    extents, strides = tuple(flatten(target.shape)), tuple(flatten(target.stride))
    if all(is_int(e) for e in extents) and strides == tuple(c_order_strides(extents)):
        return None
    return target


def _layout_fix(x: TensorType) -> str:
    """The `layout=` a storage change of `x` could name: its own, strides left to the table."""
    if isinstance(x.layout, ShardLayout):
        return f"ShardLayout(Layout({x.layout.shape!r}), {x.layout.attrs!r}, mesh)"
    return f"Layout({tuple(x.shape)!r})"


@register_typeinfer(Reshard)
def _typeinfer(op: Reshard, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    storage = x.storage if op.storage is None else op.storage
    if storage == StorageKind.UMAT:
        raise VerifyError(
            f"{op_name(op)}: the destination storage must be concrete, not umat; name gmem, "
            "smem or rmem"
        )
    if op.layout is None:
        if storage != x.storage:
            raise VerifyError(
                f"{op_name(op)}: a storage change ({x.storage} -> {storage}) must carry an "
                "explicit layout= (hir Reshard stride resolution: its strides depend on the "
                f"direction); write reshard(x, layout={_layout_fix(x)}, storage="
                f'"{storage.name.lower()}")'
            )
        return x
    if isinstance(op.layout, ShardLayout):
        return TensorType(x.shape, x.dtype, _target_layout(op, x, storage), storage)
    return TensorType(x.shape, x.dtype, _plain_target(op, x, storage), storage)


@register_access_relation(Reshard)
def _relation(op: Reshard, arg_types) -> AccessRelations:
    """Element i of the result is element i of x: the logical coordinates never move."""
    rank = len(arg_types[0].shape)
    identity = BoundaryRelation(identity_access(rank))
    return AccessRelations((identity,), (identity,))


@register_eval(Reshard)
def _eval(op: Reshard, args, out_type) -> np.ndarray:
    """On global arrays a Reshard is the identity on values: the collective it implies is run
    by the evaluator's mesh simulation, and the result's strides are honoured by the evaluator
    when it scatters the value over the mesh, never by this kernel."""
    (x,) = args
    return np.array(x, copy=True)


@register_sharded_eval(Reshard)
def _sharded_eval(op: Reshard, args, call):
    """On a mesh a Reshard is the collective its type change implies (DESIGN §4.12)."""
    return call.redistribute(args[0])


@register_spmd_lowering(Reshard)
def _spmd_lowering(op: Reshard, operands, call):
    """On devices a Reshard is the collectives its type change implies, and only those."""
    return call.reshard(operands[0])


register_surface("reshard", Reshard)
register_fusion_kind(Reshard, FusionKind.BARRIER)


@register_vjp(Reshard, takes_pending=True)
def _vjp(call, ct, ad):
    """A Reshard is the identity on the global value, so its cotangent passes to x unchanged and
    the transform completes or moves it in x's own state there (docs/autodiff.md: Broadcast ->
    Split transposes to an all-gather, Partial(sum) -> Broadcast to no communication,
    Partial(sum) -> Split to an all-gather, Split -> Broadcast to a local slice)."""
    return (lambda: ct,)


def _reshard_to(attrs_of: Callable[[Mesh], tuple]) -> Callable[[Mesh], Op]:
    """Reshard's target is a layout on the mesh under test, so the op is built per mesh."""

    def build(mesh: Mesh) -> Op:
        target = make_shard_tensor_type((8, 8), f32, mesh=mesh, attrs=attrs_of(mesh))
        return Reshard(layout=target.layout)

    return build


@register_validation_samples(Reshard)
def _validation_samples() -> list[Sample]:
    x = (operand(8, 8),)
    return [
        Sample(_reshard_to(lambda mesh: (B,) * mesh.rank), x, "to Broadcast"),
        Sample(_reshard_to(lambda mesh: (S(0),) + (B,) * (mesh.rank - 1)), x, "to S0"),
        Sample(_reshard_to(lambda mesh: (B,) * (mesh.rank - 1) + (S(1),)), x, "to S1"),
    ]


@register_stablehlo(Reshard)
def _stablehlo(op: Reshard, operands, arg_types, out_type, lw):
    """Between unsharded values a Reshard changes only storage or strides, which StableHLO does
    not model (the engine has already refused a physical layout it cannot express), so it is the
    identity. A sharded side is a collective: the SPMD exit's business, not this one's — except
    on a cta mesh, whose values are their global values on the one device (`is_on_one_device`)."""
    for what, type_ in (("operand", arg_types[0]), ("result", out_type)):
        if isinstance(type_.layout, ShardLayout) and not is_on_one_device(type_.layout):
            raise UnsupportedError(
                f"Reshard: the {what} is sharded ({type_.layout.attrs}); the single-device "
                "StableHLO exit has no collectives (use the SPMD exit for meshes)"
            )
    return operands[0]


@register_pallas(Reshard)
def _pallas(op: Reshard, args, arg_types, out_type, kx):
    """Off the mesh a Reshard changes only storage: smem/rmem are where the kernel keeps the
    value (the compiler places it), so the value is the result."""
    (x,) = args
    return x


@register_pallas_sharded(Reshard)
def _pallas_sharded(op: Reshard, args, call):
    """Within a CTA: keep the block, or take this CTA's block of a replicated value; gathering
    across CTAs is refused by the exit."""
    return call.reshard(args[0])
