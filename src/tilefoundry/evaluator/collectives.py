"""The collectives the mesh simulation runs, and the addends a Partial value is split into.

Collectives run only where the IR says so (DESIGN §4.12): a Reshard, or a reduction whose seed rule
declares a complete effect. Partial parameters are split into deliberately uneven, mixed-sign
addends so a rule that silently reads an addend as the whole value shows up as a wrong result
instead of passing by luck.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tilefoundry.errors import UnsupportedError

Coord = tuple[int, ...]
COMBINERS = ("sum", "mean", "max", "min")


def _widened(array: np.ndarray) -> np.ndarray:
    """Narrow floats accumulate in f32 (numpy/ml_dtypes lack their reductions), like the kernels."""
    if array.dtype.kind not in "biu" and array.dtype.itemsize < 4:
        return array.astype(np.float32)
    return array


def combine(arrays: list[np.ndarray], reduction: str, where: str = "collective") -> np.ndarray:
    """Reduce equally-shaped per-device arrays, in device order, to one array of their dtype."""
    if reduction not in COMBINERS:
        raise UnsupportedError(
            f"{where}: unknown reduction {reduction!r}; the reference evaluator combines with "
            f"{', '.join(COMBINERS)}"
        )
    dtype = arrays[0].dtype
    if dtype == np.bool_ and reduction == "sum":
        return np.logical_or.reduce(arrays)
    stacked = np.stack([_widened(np.asarray(a)) for a in arrays])
    with np.errstate(all="ignore"):
        result = {
            "sum": lambda: stacked.sum(axis=0),
            "mean": lambda: stacked.mean(axis=0),
            "max": lambda: stacked.max(axis=0),
            "min": lambda: stacked.min(axis=0),
        }[reduction]()
    return np.asarray(result).astype(dtype, copy=False)


def mesh_groups(coords: list[Coord], mesh_axis: int) -> dict[Coord, list[Coord]]:
    """Devices that differ only along `mesh_axis`, keyed by their other coordinates."""
    groups: dict[Coord, list[Coord]] = {}
    for coord in coords:
        key = coord[:mesh_axis] + coord[mesh_axis + 1 :]
        groups.setdefault(key, []).append(coord)
    return groups


def all_reduce(
    shards: Mapping[Coord, np.ndarray], mesh_axis: int, reduction: str, where: str = "collective"
) -> dict[Coord, np.ndarray]:
    """Every device along `mesh_axis` ends with the `reduction` of the group's arrays."""
    result: dict[Coord, np.ndarray] = {}
    for members in mesh_groups(list(shards), mesh_axis).values():
        combined = combine([shards[c] for c in members], reduction, where)
        for coord in members:
            result[coord] = combined.copy()
    return result


def partial_addends(value: np.ndarray, count: int, reduction: str, seed: int) -> list[np.ndarray]:
    """`count` addends whose `reduction` is `value`, pseudo-random and uneven but deterministic.

    sum: devices 0..n-2 get mixed-sign random shares, the last the remainder. max/min: each
    element has one pseudo-random owner holding the value; every other device holds a strictly
    lower (max) or higher (min) value where the dtype can represent one.
    """
    rng = np.random.default_rng(seed)
    if count == 1:
        return [value.copy()]
    dtype = value.dtype
    if dtype == np.bool_:
        return [value.copy()] + [np.zeros_like(value) for _ in range(count - 1)]
    if reduction == "sum":
        return _sum_shares(value, count, rng)
    owner = rng.integers(0, count, size=value.shape)
    addends = []
    for device in range(count):
        if dtype.kind in "iu":
            step = rng.integers(1, 4, size=value.shape).astype(dtype)
            info = np.iinfo(dtype)
            room = value > info.min if reduction == "max" else value < info.max
            moved = value - step if reduction == "max" else value + step
            moved = np.where(room & ((moved < value) == (reduction == "max")), moved, value)
        else:
            wide = _widened(value).astype(np.float64)
            step = 1.0 + rng.random(value.shape) * (1.0 + np.abs(wide))
            with np.errstate(all="ignore"):
                moved = (wide - step if reduction == "max" else wide + step).astype(dtype)
        addends.append(np.where(owner == device, value, moved).astype(dtype))
    return addends


def _sum_shares(value: np.ndarray, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    dtype = value.dtype
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else -5
        shares = [rng.integers(low, 6, size=value.shape).astype(dtype) for _ in range(count - 1)]
        with np.errstate(all="ignore"):
            last = value - sum(shares, start=np.zeros_like(value))
        return [*shares, last.astype(dtype)]
    wide = _widened(value).astype(np.float64)
    scale = 1.0 + np.abs(wide)
    shares = [(rng.standard_normal(value.shape) * scale).astype(dtype) for _ in range(count - 1)]
    last = wide - sum((s.astype(np.float64) for s in shares), start=np.zeros_like(wide))
    return [*shares, last.astype(dtype)]
