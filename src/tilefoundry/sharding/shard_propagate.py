"""Relation-driven shard propagation (semantic-analysis §3.2), shared by every op's typeinfer.

The output ShardAttrs follow from the input shards and the forward access maps alone: a Split
names a layout position, the canonical regroup (§3.1) turns it into a logical axis, the input map
turns that into a domain dim, and the output map says where (or whether) that dim survives. The
rule reads only the maps' structure, never bounds, so it cannot prove an owner-boundary alignment
for anything but a plain projection; every other access fails closed instead of guessing.

Partial is a value state on one mesh axis. This service never judges whether an op commutes with
the reduction (the op's typeinfer does); it only keeps each Partial at its exact mesh-axis index.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tilefoundry.analysis.access_relation import AccessRelations
from tilefoundry.analysis.access_structure import Projection
from tilefoundry.errors import VerifyError
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.ir.types.shard import Broadcast, Dynamic, Layout, Partial, ShardLayout, Split
from tilefoundry.ir.types.shard.int_tuple import flatten
from tilefoundry.ir.types.shard.mesh import c_order_strides
from tilefoundry.sharding.operand_names import OperandNames
from tilefoundry.sharding.shard_regroup import carried_factors, logical_axis_of

__all__ = ["derive_output_shard_layout", "partial_reductions_by_axis"]


def _remedy(words: OperandNames, index: int, label: str) -> str:
    return (
        f"insert reshard({words.value(index)}, Broadcast) to replicate {words.operand(index)} "
        f"along {label} first"
    )


def _error(rule: str, what: str, remedy: str | None = None) -> VerifyError:
    text = f"shard propagation (semantic-analysis §3.2 {rule}): {what}"
    return VerifyError(f"{text}; {remedy}" if remedy else text)


def partial_reductions_by_axis(layout: object) -> tuple[str | None, ...]:
    """Per mesh axis, the pending reduction of a Partial (None otherwise); `()` when not sharded."""
    if not isinstance(layout, ShardLayout):
        return ()
    return tuple(a.reduction if isinstance(a, Partial) else None for a in layout.attrs)


def _has_real_sharding(layout: object) -> bool:
    return isinstance(layout, ShardLayout) and any(
        not isinstance(attr, Broadcast) for attr in layout.attrs
    )


def _sharded_inputs(
    input_types: tuple, words: OperandNames
) -> Iterator[tuple[int, TensorType, ShardLayout]]:
    for index, type_ in enumerate(input_types):
        if isinstance(type_, TupleType):
            if any(_has_real_sharding(f.layout) for f in _tensor_leaves(type_)):
                raise _error(
                    "input shapes",
                    f"{words.operand(index)} is a tuple carrying sharding; the shared rule "
                    "propagates tensor boundaries only",
                    "the op's typeinfer must handle tuple operands itself",
                )
        elif isinstance(type_, TensorType) and _has_real_sharding(type_.layout):
            yield index, type_, type_.layout


def _tensor_leaves(type_: TupleType) -> Iterator[TensorType]:
    for f in type_.fields:
        yield from _tensor_leaves(f) if isinstance(f, TupleType) else (f,)


@dataclass
class _DimBinding:
    """How inputs shard one domain dim: the source axis's factors, (offset, mesh axis) pairs."""

    factors: tuple
    splits: frozenset[tuple[int, int]]
    input_index: int


@dataclass
class _State:
    """Everything gathered from the inputs, keyed by domain dim and by mesh axis."""

    dims: dict[int, _DimBinding] = field(default_factory=dict)
    split_dim_of_axis: dict[int, tuple[int, int]] = field(default_factory=dict)
    partial_of_axis: dict[int, tuple[str, int]] = field(default_factory=dict)


def _collect_input(
    state: _State, index: int, type_: TensorType, sl: ShardLayout, words: OperandNames
):
    mesh = sl.mesh
    access = words.relations.inputs[index].pattern
    operand = words.operand(index)
    if access.rank != len(type_.shape):
        raise _error(
            "rule 1",
            f"{operand} has rank {len(type_.shape)} but its access map indexes {access.rank} axes",
        )
    per_dim: dict[int, list[tuple[int, int]]] = {}
    factors_of_dim: dict[int, tuple] = {}
    layout_shape = flatten(sl.layout.shape)
    for mesh_axis, attr in enumerate(sl.attrs):
        label = mesh.axes[mesh_axis].label
        if isinstance(attr, Dynamic):
            raise _error(
                "rule 1",
                f"{operand} is Dynamic on {label}; an unresolved distribution cannot be propagated",
                "resolve it with reshard(x, Split or Broadcast) first",
            )
        if isinstance(attr, Partial):
            _bind_partial(state, index, mesh_axis, attr.reduction, label, words)
        if not isinstance(attr, Split):
            continue
        logical_axis, group = logical_axis_of(type_.shape, layout_shape, attr.axis, operand, label)
        axis_access = access.axes[logical_axis]
        if not isinstance(axis_access, Projection):
            raise _error(
                "rule 1, projection constraint",
                f"{operand} is Split on {label} along logical axis {logical_axis}, which the "
                f"op reads as {axis_access}; only a zero-offset, unit-coefficient access of one "
                "domain dim can carry a Split (constant, translated, scaled and floor/mod "
                "accesses fail closed)",
                _remedy(words, index, label),
            )
        dim = axis_access.dim
        per_dim.setdefault(dim, []).append((group.index(attr.axis), mesh_axis))
        factors_of_dim[dim] = tuple(layout_shape[p] for p in group)
        _bind_split_axis(state, index, mesh_axis, dim, label, words)
    for dim, pairs in per_dim.items():
        binding = _DimBinding(factors_of_dim[dim], frozenset(pairs), index)
        seen = state.dims.setdefault(dim, binding)
        if seen.splits != binding.splits or seen.factors != binding.factors:
            raise _error(
                "rule 6",
                f"{words.operands(seen.input_index, index)} shard {words.dim(dim)} "
                f"incompatibly ({_describe(seen, mesh)} vs {_describe(binding, mesh)})",
                f"insert reshard on {words.operand(index)} so both split that dim the same way",
            )


def _describe(binding: _DimBinding, mesh) -> str:
    parts = ", ".join(
        f"factor {o} of {binding.factors} on {mesh.axes[a].label}"
        for o, a in sorted(binding.splits)
    )
    return parts


def _bind_split_axis(
    state: _State, index: int, mesh_axis: int, dim: int, label: str, words: OperandNames
) -> None:
    if mesh_axis in state.partial_of_axis:
        other = state.partial_of_axis[mesh_axis][1]
        raise _error(
            "rule 4/6",
            f"{label} is Partial on {words.operand(other)} and Split on {words.operand(index)}",
            _completion(words, other, "the Partial"),
        )
    bound = state.split_dim_of_axis.setdefault(mesh_axis, (dim, index))
    if bound[0] != dim:
        raise _error(
            "rule 6",
            f"{label} splits {words.dim(bound[0])} on {words.operand(bound[1])} but "
            f"{words.dim(dim)} on {words.operand(index)}; one mesh axis cannot partition two "
            "dims",
            _remedy(words, index, label),
        )


def _completion(words: OperandNames, index: int, what: str) -> str:
    return (
        f"insert reshard({words.value(index)}, Broadcast) on {words.operand(index)} to "
        f"complete {what} first"
    )


def _bind_partial(
    state: _State, index: int, mesh_axis: int, reduction: str, label: str, words: OperandNames
) -> None:
    if mesh_axis in state.split_dim_of_axis:
        other = state.split_dim_of_axis[mesh_axis][1]
        raise _error(
            "rule 4/6",
            f"{label} is Split on {words.operand(other)} and Partial({reduction}) on "
            f"{words.operand(index)}",
            _completion(words, index, "the Partial"),
        )
    seen = state.partial_of_axis.setdefault(mesh_axis, (reduction, index))
    if seen[0] != reduction:
        raise _error(
            "rule 4",
            f"{label} is Partial({seen[0]}) on {words.operand(seen[1])} but "
            f"Partial({reduction}) on {words.operand(index)}; two different pending reductions "
            "cannot combine",
            _completion(words, index, "its Partial"),
        )


def _output_axis_of(
    dim: int, out_axes: tuple, label: str, words: OperandNames, index: int
) -> int | None:
    """Output axis that carries `dim` as a projection; None when the output does not read it."""
    readers = [j for j, a in enumerate(out_axes) if dim in a.dims]
    if not readers:
        return None
    if len(readers) == 1 and isinstance(out_axes[readers[0]], Projection):
        return readers[0]
    forms = ", ".join(f"axis {j} as {out_axes[j]}" for j in readers)
    raise _error(
        "rule 2, projection constraint",
        f"{words.dim(dim)}, split on {label}, reaches the output only through {forms}; a "
        "surviving dim must reach exactly one output axis as a plain projection",
        _remedy(words, index, label),
    )


def derive_output_shard_layout(
    input_types: tuple,
    relation: AccessRelations,
    output_shape: tuple,
    *,
    partial_reduction_dims: frozenset[int] = frozenset(),
    complete_reduction_dims: frozenset[int] = frozenset(),
    fresh_strides: bool = False,
    output_index: int = 0,
    operand_names: tuple[str, ...] | None = None,
) -> ShardLayout | None:
    """The output ShardLayout of boundary `relation.outputs[output_index]`, or None (replicated).

    Reads only the input types, the forward maps, the requested output shape and the explicit
    controls — never relation bounds or an already-derived output type. `operand_names` (one per
    input, the op's ParamDef names) word the refusals; without them they say input positions.
    """
    partial_dims, complete_dims = (
        frozenset(partial_reduction_dims),
        frozenset(complete_reduction_dims),
    )
    if partial_dims & complete_dims:
        raise _error(
            "reduction effects (DESIGN §4.5)",
            f"domain dims {sorted(partial_dims & complete_dims)} are declared both partial and "
            "complete; the two effect sets must not overlap",
        )
    if len(input_types) != len(relation.inputs):
        raise _error(
            "input shapes",
            f"{len(input_types)} input types for {len(relation.inputs)} input boundaries",
        )
    out_axes = relation.outputs[output_index].pattern.axes
    if len(out_axes) != len(output_shape):
        raise _error(
            "rule 2",
            f"the output map indexes {len(out_axes)} axes but the output shape "
            f"{tuple(output_shape)} has rank {len(output_shape)}",
        )
    read_by_output = frozenset().union(*(a.dims for a in out_axes))
    stray = (partial_dims | complete_dims) & read_by_output
    if stray:
        raise _error(
            "rule 3",
            f"domain dims {sorted(stray)} are declared reduced but the output map reads them",
        )
    words = OperandNames(operand_names, relation)
    sharded = list(_sharded_inputs(tuple(input_types), words))
    if not sharded:
        return None
    mesh = sharded[0][2].mesh
    state = _State()
    for index, type_, sl in sharded:
        if sl.mesh != mesh:
            raise _error(
                "mesh",
                f"{words.operand(index)} is sharded on {sl.mesh!r} but "
                f"{words.operand(sharded[0][0])} on {mesh!r}; inputs with real sharding must "
                "share one mesh",
                f"insert reshard on {words.operand(index)} onto the common mesh",
            )
        _collect_input(state, index, type_, sl, words)

    attrs: list = [Broadcast() for _ in range(mesh.rank)]
    for mesh_axis, (reduction, _) in state.partial_of_axis.items():
        attrs[mesh_axis] = Partial(reduction)
    splits_of_output_axis: dict[int, _DimBinding] = {}
    for dim, binding in sorted(state.dims.items()):
        label = ", ".join(mesh.axes[a].label for _, a in sorted(binding.splits))
        out_axis = _output_axis_of(dim, out_axes, label, words, binding.input_index)
        if out_axis is not None:
            splits_of_output_axis[out_axis] = binding
        elif dim in partial_dims:
            for _, mesh_axis in binding.splits:
                attrs[mesh_axis] = Partial("sum")
        elif dim not in complete_dims:
            raise _error(
                "rule 3 (DESIGN §4.5)",
                f"{words.operand(binding.input_index)} is Split on {label} along "
                f"{words.dim(dim)}, which the op reduces, but the op declared no reduction "
                "effect for it (partial or complete); there is no silent default",
                _remedy(words, binding.input_index, label),
            )
    shape: list = []
    for out_axis, extent in enumerate(output_shape):
        binding = splits_of_output_axis.get(out_axis)
        if binding is None:
            shape.append(extent)
            continue
        label = ", ".join(mesh.axes[a].label for _, a in sorted(binding.splits))
        factors, offsets = carried_factors(binding.factors, binding.splits, extent, label)
        for mesh_axis, offset in offsets.items():
            attrs[mesh_axis] = Split(len(shape) + offset)
        shape.extend(factors)
    stride = _output_stride(tuple(shape), attrs, sharded, fresh_strides)
    return ShardLayout(Layout(tuple(shape), stride), tuple(attrs), mesh)


def _output_stride(shape: tuple, attrs: list, sharded: list, fresh: bool) -> tuple | None:
    """Keep an input's physical strides when the output is laid out exactly like it, else C-order.

    "Exactly like it" means the same layout shape *and* the same Split positions: a transpose of a
    square tensor has the same shape but moves the split, and the old strides would then alias.
    """
    if not fresh:
        splits = {a: s.axis for a, s in enumerate(attrs) if isinstance(s, Split)}
        for _, _, sl in sharded:
            same_splits = {a: s.axis for a, s in enumerate(sl.attrs) if isinstance(s, Split)}
            layout = sl.layout
            if (
                isinstance(layout, Layout)
                and flatten(layout.shape) == shape
                and (same_splits == splits)
            ):
                return layout.stride
    if all(isinstance(e, int) for e in shape):
        return c_order_strides(shape)
    return None
