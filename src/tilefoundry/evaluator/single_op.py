"""One op call outside any Function: the seam the sharding-rule validator drives.

The validator builds an op, its operand types (each mesh axis in a chosen Split / Broadcast /
Partial state) and the type typeinfer derived, places random inputs with `scatter`, and needs the
per-device outputs; running the call goes through exactly the path `evaluate` takes, so what the
validator refutes is what users would get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tilefoundry.errors import EvalError
from tilefoundry.evaluator.collectives import Coord
from tilefoundry.evaluator.mesh_sim import ShardedCall, run_call, touches_mesh
from tilefoundry.evaluator.values import MeshValue, devices
from tilefoundry.ir.core import Op
from tilefoundry.ir.types import TensorType, TupleType, Type
from tilefoundry.ir.types.shard import ShardLayout
from tilefoundry.rules import EVAL


def _static_shape(type_: TensorType, what: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in type_.shape):
        raise EvalError(f"{what}: a single-op run needs static shapes, got {list(type_.shape)}")
    return tuple(type_.shape)


def run_op(op: Op, arg_types: Sequence[Type], out_type: Type, args: Sequence[Any]) -> Any:
    """`op` on evaluator values (global arrays or MeshValues) typed `arg_types` -> `out_type`."""
    fields = out_type.fields if isinstance(out_type, TupleType) else (out_type,)
    shapes = [_static_shape(f, f"{type(op).__name__} result") for f in fields]
    if touches_mesh(args, out_type):
        return run_call(ShardedCall(op, args, arg_types, out_type, shapes))
    return EVAL.lookup(type(op))(op, tuple(args), out_type)


def run_op_on_devices(
    op: Op,
    arg_types: Sequence[TensorType],
    out_type: Type,
    per_device: Mapping[Coord, Sequence[np.ndarray]],
) -> dict[Coord, Any]:
    """Per-device inputs in, per-device outputs out (a tuple per device for a tuple result).

    Each argument with a ShardLayout type is taken as that layout's per-device shards; a plain
    argument must be the same replicated array on every device.
    """
    meshes = [t.layout.mesh for t in arg_types if isinstance(t.layout, ShardLayout)]
    if not meshes:
        raise EvalError(f"{type(op).__name__}: run_op_on_devices needs a sharded argument")
    coords = devices(meshes[0])
    if set(per_device) != set(coords):
        raise EvalError(f"{type(op).__name__}: per_device must hold exactly the devices {coords}")
    args: list[Any] = []
    for index, type_ in enumerate(arg_types):
        shards = {c: np.asarray(per_device[c][index]) for c in coords}
        if isinstance(type_.layout, ShardLayout):
            shape = _static_shape(type_, f"argument {index}")
            args.append(MeshValue(type_.layout.mesh, type_, shape, shards))
        else:
            args.append(shards[coords[0]])
    result = run_op(op, arg_types, out_type, args)
    leaves = result if isinstance(result, tuple) else (result,)
    per_coord = {c: tuple(_shard(leaf, c) for leaf in leaves) for c in coords}
    return per_coord if isinstance(result, tuple) else {c: v[0] for c, v in per_coord.items()}


def _shard(value: Any, coord: Coord) -> np.ndarray:
    return value.shards[coord] if isinstance(value, MeshValue) else np.asarray(value)
