"""Reshard and Local in the mesh simulation: the two ops that move a value between layouts.

A Reshard is simulated as "complete, then redistribute" (DESIGN §4.12): every pending Partial the
target does not keep is all-reduced, the value is assembled globally, and each device takes what
the target layout gives it. A Partial the target keeps (a layout-only change) is carried addend
by addend, so no device's share is ever silently completed or re-split.
"""

from __future__ import annotations

from itertools import product as cartesian
from typing import Any

import numpy as np

from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator.values import MeshValue, gather, scatter
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Partial, ShardLayout


def _kept_partials(value: MeshValue, target: ShardLayout) -> tuple[int, ...]:
    if target.mesh != value.mesh:
        return ()
    return tuple(
        m
        for m, (held, wanted) in enumerate(zip(value.type.layout.attrs, target.attrs, strict=True))
        if isinstance(held, Partial) and held == wanted
    )


def redistribute(value: Any, out_type: TensorType, where: str) -> Any:
    """`value` laid out as `out_type` says: global arrays are scattered, per-device values are
    completed and redistributed; a target without a ShardLayout keeps the value as it is."""
    if isinstance(value, MeshValue) and (value.per_device or not value.sharded):
        raise UnsupportedError(
            f"{where}: cannot reshard a per-device value (the result of local, or computed from "
            "one); it has no global value to redistribute; reshard the sharded value that local "
            "read instead"
        )
    target = out_type.layout
    if not isinstance(target, ShardLayout):
        return value if isinstance(value, MeshValue) else np.array(value, copy=True)
    if not isinstance(value, MeshValue):
        return scatter(np.asarray(value), out_type, where)
    kept = _kept_partials(value, target)
    shards = {}
    for held in cartesian(*(range(value.mesh.shape[m]) for m in kept)):
        chosen = {c: s for c, s in value.shards.items() if tuple(c[m] for m in kept) == held}
        addend = MeshValue(value.mesh, value.type, value.shape, chosen)
        whole = gather(addend, where, complete_partials=True, keep=frozenset(kept))
        placed = scatter(whole, out_type, where, split_partials=False)
        for coord, shard in placed.shards.items():
            if tuple(coord[m] for m in kept) == held:
                shards[coord] = shard
    return MeshValue(target.mesh, out_type, value.shape, shards)


def local_view(value: Any, out_type: TensorType, where: str) -> MeshValue:
    """Each device's shard of a sharded value, as a per-device value of the plain `out_type`."""
    if not (isinstance(value, MeshValue) and value.sharded):
        raise UnsupportedError(f"{where}: needs a sharded value; this one has no ShardLayout")
    first = next(iter(value.shards.values()))
    shards = {c: np.array(s, copy=True) for c, s in value.shards.items()}
    return MeshValue(value.mesh, out_type, tuple(first.shape), shards, per_device=True)
