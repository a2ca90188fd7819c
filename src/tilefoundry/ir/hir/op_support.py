"""Shared building blocks of HIR op rules (typeinfer, access relations, reference kernels).

Every op module states only what is particular to its op; what every op rule would otherwise
repeat lives here once: checking that operands are tensors, normalising axes, refusing a pending
Partial the op does not commute with (with the one remedy message users learn), calling the shard
propagation engine through the op's own registered access relation, anchoring output storage, and
computing narrow floats in f32.

Rule conventions (every op module follows them):
- typeinfer: `rule(op, arg_types, ctx) -> Type` (registered with `register_typeinfer`).
- access relation: `rule(op, arg_types) -> AccessRelations`, a pure function of the op's
  attributes and operand types; it never reads the Call's own type, since typeinfer asks for it.
  An op whose accesses are data-dependent registers `NO_AFFINE_RELATION` instead.
- reference kernel: `rule(op, args, out_type) -> ndarray | tuple[ndarray, ...]` over numpy (or
  ml_dtypes) arrays. Shapes come from the arrays and from `out_type`, never from a global shape
  baked into an attribute when `out_type` can say it, so the evaluator can run the same kernel on
  one device's block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from tilefoundry.analysis.access_relation import AccessRelations, broadcast_shapes
from tilefoundry.analysis.storage import anchor_storage
from tilefoundry.caches import memoize
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op
from tilefoundry.ir.types import DType, StorageKind, TensorType, Type, f32, normalize_dim
from tilefoundry.ir.types.shard import Mesh, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.rules import ACCESS_RELATION
from tilefoundry.sharding.operand_names import schema_names
from tilefoundry.sharding.shard_propagate import derive_output_shard_layout
from tilefoundry.sharding.shard_reading import pending_partials
from tilefoundry.sharding.shard_regroup import logical_groups

NO_AFFINE_RELATION: Callable[..., Any] = lambda op, arg_types: None  # noqa: E731
"""The explicit marker an op registers when no affine access relation describes it (its write
boundaries are runtime data, e.g. CacheUpdate): traffic analysis then charges whole tensors."""


def op_name(op: Op) -> str:
    return type(op).__name__


def tensor_operands(op: Op, arg_types: Sequence[Type]) -> tuple[TensorType, ...]:
    """The operand types, each checked to be a tensor (a tuple is consumed only via projection)."""
    names = type(op).inputs()
    for name, type_ in zip(names, arg_types, strict=True):
        if not isinstance(type_, TensorType):
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' must be a tensor, got {type_}; project a tuple "
                "with tuple_get_item first"
            )
    return tuple(arg_types)  # type: ignore[return-value]


def normalize_axis(op: Op, axis: int, rank: int, what: str = "axis") -> int:
    """`axis` in [-rank, rank) as a non-negative index; anything else names the op and bound."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise VerifyError(f"{op_name(op)}: {what} must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        raise VerifyError(
            f"{op_name(op)}: {what} {axis} is out of range for rank {rank} "
            f"(valid: {-rank}..{rank - 1})"
        )
    return int(axis) % rank if rank else 0


def mesh_axis_label(mesh: Mesh, axis: int) -> str:
    """How diagnostics name a mesh axis: `mesh axis 1 ('y')` (MeshAxis.label)."""
    return mesh.axes[axis].label


def completion_remedy(operand: str, layout: ShardLayout, axis: int) -> str:
    return (
        f"insert reshard({operand}, ...) to Broadcast on {mesh_axis_label(layout.mesh, axis)} "
        "to complete the pending reduction first"
    )


def refuse_partials(
    op: Op,
    operands: Iterable[tuple[str, Type]],
    *,
    allowed: Iterable[str] = (),
    why: str,
) -> None:
    """Refuse every Partial whose reduction is not in `allowed` (semantic-analysis §3.2 step 4).

    `why` is the op's commutation fact in a few words ("softmax normalises across an axis"), so
    the message says both what is wrong and why the op cannot carry the pending reduction.
    """
    allowed = frozenset(allowed)
    for name, type_ in operands:
        for axis, reduction in pending_partials(type_).items():
            if reduction not in allowed:
                layout = type_.layout
                raise VerifyError(
                    f"{op_name(op)}: operand '{name}' carries Partial({reduction}) on "
                    f"{mesh_axis_label(layout.mesh, axis)}, and {why}; "
                    f"{completion_remedy(name, layout, axis)}"
                )


def relations_of(op: Op, arg_types: Sequence[Type]) -> AccessRelations | None:
    """The op's own registered access relation for these operand types."""
    return ACCESS_RELATION.lookup(type(op))(op, tuple(arg_types))


def propagate(
    op: Op,
    arg_types: Sequence[Type],
    out_shape: Sequence[Any],
    *,
    relations: AccessRelations | None = None,
    operands: Sequence[str] | None = None,
    **controls: Any,
) -> ShardLayout | None:
    """The output ShardLayout from the shared engine (semantic-analysis §3.2), errors prefixed
    with the op's name so the user sees which op refused, and naming each operand by `operands`
    (default: the op's ParamDef inputs, when `arg_types` are those)."""
    names = tuple(operands) if operands is not None else schema_names(op, len(arg_types))
    controls["operand_names"] = names
    try:
        if relations is None:
            return _propagate_memo(op, tuple(arg_types), tuple(out_shape), _freeze(controls))
        return derive_output_shard_layout(tuple(arg_types), relations, tuple(out_shape), **controls)
    except VerifyError as err:
        raise VerifyError(f"{op_name(op)}: {err.message}") from None


def _freeze(controls: dict[str, Any]) -> tuple:
    return tuple(sorted(controls.items()))


@memoize("op_support: shard propagation results", 4096)
def _propagate_memo(op: Op, arg_types: tuple, out_shape: tuple, controls: tuple):
    """Propagation is a pure function of (op, operand types, output shape, controls), all
    hashable values, so a program that repeats one op on one shape pays for it once."""
    relations = relations_of(op, arg_types)
    return derive_output_shard_layout(arg_types, relations, out_shape, **dict(controls))


def result_storage(op: Op, arg_types: Iterable[Type]) -> StorageKind:
    """Output storage anchored on the operands' concrete storages (semantic-analysis §3.3)."""
    storages = [t.storage for t in arg_types if isinstance(t, TensorType)]
    return anchor_storage(op_name(op), storages)


def same_dtype(op: Op, named_types: Sequence[tuple[str, TensorType]]) -> DType:
    """The one dtype shared by every operand; there is no implicit promotion in HIR."""
    (first_name, first), *rest = named_types
    for name, type_ in rest:
        if type_.dtype != first.dtype:
            raise VerifyError(
                f"{op_name(op)}: operand '{name}' is {type_.dtype} but '{first_name}' is "
                f"{first.dtype}; there is no implicit promotion, insert cast({name}, "
                f"{first.dtype})"
            )
    return first.dtype


def numpy_dtype(dtype: DType) -> np.dtype:
    return _numpy_dtype(dtype)


@memoize("op_support: numpy dtypes", 64)
def _numpy_dtype(dtype: DType) -> np.dtype:
    return np.dtype(dtype.to_numpy())


def compute_in_f32(fn: Callable[..., np.ndarray], out_dtype: DType, *arrays: np.ndarray):
    """Run `fn` on float operands widened to f32 when narrower (numpy/ml_dtypes lack most narrow
    kernels and promote inconsistently), then round once to the result dtype."""
    for array in arrays:
        if _narrow(array.dtype):
            arrays = tuple(a.astype(np.float32) if _narrow(a.dtype) else a for a in arrays)
            break
    result = np.asarray(fn(*arrays))
    target = _numpy_dtype(out_dtype)
    return result if result.dtype == target else result.astype(target)


def _narrow(dtype: np.dtype) -> bool:
    return dtype.kind not in "biu" and dtype.itemsize < 4


def computes_into(out: np.ndarray, *arrays: np.ndarray) -> bool:
    """Whether a kernel run through `compute_in_f32` on `arrays` may write straight into `out`
    (an EVAL_INTO rule): every operand and `out` share one float dtype of f32 or wider, so nothing
    is widened and the final rounding is the identity."""
    dtype = out.dtype
    return dtype.kind == "f" and not _narrow(dtype) and all(a.dtype == dtype for a in arrays)


def is_narrow_float(dtype: DType) -> bool:
    return dtype.is_float and dtype.bits < f32.bits


def split_owners(who: str, type_: TensorType) -> dict[int, tuple[int, int, tuple]]:
    """Mesh axis -> (logical axis, factor index inside that axis, the axis's layout factors).

    A Split names a layout position; ops that reason per logical axis (which axis is split, is
    it split the same way on two operands) need the canonical regroup (semantic-analysis §3.1)
    behind it. A position that factors no single logical axis has no such reading and is refused.
    """
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        return {}
    positions = flatten(layout.layout.shape)
    groups = logical_groups(tuple(type_.shape), positions)
    owners = {}
    for mesh_axis, attr in enumerate(layout.attrs):
        if not isinstance(attr, Split):
            continue
        found = [(axis, g) for axis, g in enumerate(groups) if g is not None and attr.axis in g]
        if not found:
            raise VerifyError(
                f"{who}: {mesh_axis_label(layout.mesh, mesh_axis)} splits layout position "
                f"{attr.axis} of {positions}, which factors no single axis of the logical shape "
                f"{tuple(type_.shape)}; reshard it to a canonical layout first"
            )
        axis, group = found[0]
        owners[mesh_axis] = (axis, group.index(attr.axis), tuple(positions[p] for p in group))
    return owners


def broadcast_operand_shapes(op: Op, operands: Sequence[tuple[str, TensorType]]) -> tuple:
    """The torch broadcast of the operands' shapes, refused in the op's name when they clash."""
    try:
        return broadcast_shapes(*(t.shape for _, t in operands))
    except VerifyError:
        shapes = ", ".join(f"'{name}' {list(t.shape)}" for name, t in operands)
        raise VerifyError(
            f"{op_name(op)}: operand shapes do not broadcast ({shapes}); each axis, aligned from "
            "the right, must be equal or 1 — insert broadcast_to or reshape first"
        ) from None


def shape_attribute(shape: tuple) -> tuple:
    """A target-shape attribute: every entry a non-negative int or a symbolic dim."""
    if not isinstance(shape, tuple | list):
        raise VerifyError(f"a shape is a tuple of dims, got {shape!r} (a scalar is shape ())")
    dims = tuple(normalize_dim(d, what="shape entry") for d in shape)
    for axis, dim in enumerate(dims):
        if isinstance(dim, int) and dim < 0:
            raise VerifyError(f"shape {list(dims)} has the negative extent {dim} at axis {axis}")
    return dims


def as_dtype(value: object) -> DType:
    """A dtype attribute accepts a DType or its name (DESIGN §4.9: `DType.from_name`)."""
    return value if isinstance(value, DType) else DType.from_name(value)


def check_eps(value: object) -> float:
    """eps is a finite, non-negative number (an int is widened)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise VerifyError(f"eps must be a number, got {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise VerifyError(f"eps must be finite and non-negative, got {value!r}")
    return float(value)


def number_attribute(value: object) -> bool | int | float:
    """A compile-time number attribute (a padding constant, an iota's start): a Python number,
    or a numpy scalar made one so the op stays hashable and prints plainly."""
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, bool | int | float):
        raise VerifyError(f"must be a compile-time Python number, got {value!r}")
    return value
