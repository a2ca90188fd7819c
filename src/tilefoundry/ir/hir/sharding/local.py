"""Local: one device's own block of a sharded tensor, as a plain tensor (hir §1.3).

The result type describes what *one* mesh instance holds, so it only makes sense per device: it
has no global value, which is why the reference kernel refuses to run on global arrays and why no
affine relation maps its coordinates (the map from a local to a global coordinate depends on the
device's mesh coordinate, which is not a value in the IR).

On a cta mesh it is refused at typeinfer: inside a kernel a CTA's block already is its value,
and a per-CTA value can never become a kernel result, so the simulator and the Pallas exit agree
by both refusing it.
"""

from __future__ import annotations

from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    NO_AFFINE_RELATION,
    op_name,
    refuse_partials,
    split_owners,
    tensor_operands,
)
from tilefoundry.ir.types import TensorType, dim_floordiv
from tilefoundry.ir.types.shard import (
    Dynamic,
    Layout,
    ShardLayout,
    shard_layout_local_shape,
    split_positions,
)
from tilefoundry.ir.types.shard.int_tuple import flatten, is_value
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_not_sampled,
    register_sharded_eval,
    register_spmd_lowering,
    register_stablehlo,
    register_surface,
    register_typeinfer,
)
from tilefoundry.sharding.shard_regroup import logical_groups

__all__ = ["Local"]


class Local(Op):
    """The current device's local view of a ShardLayout tensor."""

    x = ParamDef("input")


def _sharded_input(op: Op, x: TensorType) -> ShardLayout:
    layout = x.layout
    if not isinstance(layout, ShardLayout):
        raise VerifyError(
            f"{op_name(op)}: x must carry a ShardLayout (hir §1.3), got "
            f"{'no layout' if layout is None else layout}; only a sharded value has a local view"
        )
    if not isinstance(layout.layout, Layout):
        raise VerifyError(
            f"{op_name(op)}: x's ShardLayout binds a {type(layout.layout).__name__}, whose "
            "local projection is not defined; reshard it onto a plain Layout first"
        )
    if any(t.name == "cta" for t in layout.mesh.topologies):
        raise VerifyError(
            f"{op_name(op)}: x lives on a cta mesh, where a CTA's block already is the value the "
            "kernel computes with (DESIGN §4.13) and a per-CTA view could never leave the kernel "
            "(it has no global value); use x itself"
        )
    for mesh_axis, attr in enumerate(layout.attrs):
        if isinstance(attr, Dynamic):
            raise VerifyError(
                f"{op_name(op)}: x is Dynamic on {layout.mesh.axes[mesh_axis].label}, so its "
                "local block is unknown; reshard it to Split or Broadcast first"
            )
    refuse_partials(
        op,
        [("x", x)],
        why="a local view would expose one device's addend as if it were the value, and a "
        "plain result type cannot say it is still pending",
    )
    return layout


def _local_shape(op: Op, x: TensorType, layout: ShardLayout) -> tuple:
    """seed: each split logical axis contracts by its mesh extents. A static one divides
    exactly by construction (a Split position's extent is its mesh extent, and the axis is the
    product of its positions); a symbolic one stays symbolic as the quotient, as in
    `shard_layout_local_shape`."""
    divisor_of_axis: dict[int, int] = {}
    for mesh_axis, (axis, _, _) in split_owners(op_name(op), x).items():
        size = layout.mesh.axes[mesh_axis].size
        if not isinstance(size, int):
            raise VerifyError(
                f"{op_name(op)}: {layout.mesh.axes[mesh_axis].label} has the launch-provided "
                "extent None, so the local shape is unknown"
            )
        divisor_of_axis[axis] = divisor_of_axis.get(axis, 1) * size
    return tuple(
        dim_floordiv(extent, divisor_of_axis[axis]) if axis in divisor_of_axis else extent
        for axis, extent in enumerate(x.shape)
    )


def _local_layout(op: Op, x: TensorType, layout: ShardLayout, shape: tuple) -> Layout:
    """The base Layout projected to the local shape: per logical axis, its layout positions with
    the split ones of local extent 1 dropped, each kept one with its stride (several make a nested
    mode). Un-materialised strides become C-order over the local shape, the compact form one
    instance's engine has."""
    local = shard_layout_local_shape(layout)
    stride = layout.layout.stride
    strides = flatten(stride) if stride is not None else c_order_strides(local)
    split = split_positions(layout)
    modes, mode_strides = [], []
    groups = logical_groups(tuple(x.shape), flatten(layout.shape))
    if None in groups:
        raise VerifyError(
            f"{op_name(op)}: the layout shape {layout.shape} does not factor the logical shape "
            f"{list(x.shape)} axis by axis, so the local layout has no per-axis form; reshard "
            "x to a canonical layout first"
        )
    for axis, group in enumerate(groups):
        kept = [p for p in group if p not in split or not is_value(local[p], 1)]
        if not kept:
            modes.append(shape[axis])
            mode_strides.append(0)
        elif len(kept) == 1:
            modes.append(local[kept[0]])
            mode_strides.append(strides[kept[0]])
        else:
            modes.append(tuple(local[p] for p in kept))
            mode_strides.append(tuple(strides[p] for p in kept))
    return Layout(tuple(modes), tuple(mode_strides))


@register_typeinfer(Local)
def _typeinfer(op: Local, arg_types, ctx) -> TensorType:
    (x,) = tensor_operands(op, arg_types)
    layout = _sharded_input(op, x)
    shape = _local_shape(op, x, layout)
    return TensorType(shape, x.dtype, _local_layout(op, x, layout, shape), x.storage)


register_access_relation(Local)(NO_AFFINE_RELATION)


@register_eval(Local)
def _eval(op: Local, args, out_type):
    raise UnsupportedError(
        "Local: a local view is one device's block and has no value on global arrays; it "
        "evaluates only under the evaluator's mesh simulation"
    )


@register_sharded_eval(Local)
def _sharded_eval(op: Local, args, call):
    """Local exposes each device's own shard as a plain per-device value."""
    return call.local(args[0])


@register_spmd_lowering(Local)
def _spmd_lowering(op: Local, operands, call):
    """A device's local view is the block it already holds: no data moves."""
    return call.local(operands[0])


register_surface("local", Local)
register_fusion_kind(Local, FusionKind.BARRIER)
register_not_sampled(
    Local,
    "its result is each device's own shard by definition; there is no global value to "
    "compare with the unsharded run",
)


@register_stablehlo(Local)
def _stablehlo(op: Local, operands, arg_types, out_type, lw):
    """A device's own block exists only under SPMD partitioning."""
    raise UnsupportedError(
        "Local: a local view is one device's block of a sharded value; the single-device "
        "StableHLO exit has no devices to take it from (use the SPMD exit for meshes)"
    )
