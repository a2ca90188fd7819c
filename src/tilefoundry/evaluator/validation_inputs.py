"""Input generators for the sharding-rule validator, built so a wrong rule cannot pass by luck.

A rule is refuted only if some input exposes it, so the inputs are adversarial by construction
(the lesson of DTensor's `strategy_validation`, whose generators had to be hardened before they
caught `abs P(sum) -> P(sum)`):

- Partial(sum) addends are uneven (device 0 takes a share that differs per operand, so
  `P(sum) * P(sum)` cannot pass by symmetry) and mixed-sign (a zero-sum noise larger than the
  value is added, so `abs` or `relu` of an addend is not the addend of `abs`/`relu`).
- Partial(max|min) addends give each element one owner holding the truth, chosen by an offset
  that alternates along the elements and shifts per operand, so no device holds the truth
  everywhere; the other devices hold strictly lower (max) or higher (min) values of either sign.
- Every sample is also run sign-flipped, to catch rules that hold for one sign only.
- An all-zero truth says nothing about a rule, so it is redrawn.

The per-device split of a value over several Partial mesh axes is done innermost axis first, so
that completing the mesh axes in order (what `evaluator.gather` does) undoes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilefoundry.errors import EvalError
from tilefoundry.evaluator.collectives import Coord
from tilefoundry.evaluator.values import as_index, axis_indices, devices, index_key
from tilefoundry.ir.types import TensorType
from tilefoundry.ir.types.shard import Partial, ShardLayout
from tilefoundry.rules.validation_samples import Domain

REDRAWS = 8


def draw_truth(
    shape: Sequence[int], dtype: np.dtype, domain: Domain, rng: np.random.Generator
) -> np.ndarray:
    """A random global value; an all-zero draw (uninformative) is redrawn."""
    for _ in range(REDRAWS):
        value = _draw(tuple(shape), np.dtype(dtype), domain, rng)
        if not is_uninformative(value) or domain.kind in ("index", "constant"):
            return value
    raise EvalError(f"validator: {REDRAWS} draws of {dtype}{list(shape)} were all zero")


def _draw(shape: tuple[int, ...], dtype: np.dtype, domain: Domain, rng) -> np.ndarray:
    if domain.kind == "bool" or dtype == np.bool_:
        return rng.random(shape) < 0.5
    if domain.kind == "constant":
        return np.full(shape, domain.bound, dtype=dtype)
    if domain.kind == "index":
        return rng.integers(0, domain.bound, size=shape).astype(dtype)
    if domain.kind == "grid":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    if dtype.kind in "iu":
        low = 1 if domain.kind == "positive" or dtype.kind == "u" else -9
        return rng.integers(low, 10, size=shape).astype(dtype)
    values = rng.standard_normal(shape) * 2.0
    if domain.kind == "positive":
        values = np.abs(values) + 0.25
    return values.astype(dtype)


def is_uninformative(value: np.ndarray) -> bool:
    """All zero (all False): every rule that maps zero to zero would pass on it."""
    array = np.asarray(value)
    return array.size > 0 and not np.any(array)


def sign_flipped(value: np.ndarray, domain: Domain) -> np.ndarray:
    """The rerun's value: negated where the domain is symmetric, unchanged otherwise."""
    if not domain.flips:
        return value
    with np.errstate(all="ignore"):
        return np.negative(value).astype(value.dtype)


def _share(operand: int, count: int) -> np.ndarray:
    """Device 0's uneven fraction differs per operand; the others split the rest 2:1:1..."""
    first = 0.55 + 0.1 * (operand % 4)
    rest = np.array([2.0] + [1.0] * (count - 2)) if count > 1 else np.zeros(0)
    return np.concatenate([[first], (1.0 - first) * rest / max(rest.sum(), 1.0)])


def sum_addends(
    value: np.ndarray, count: int, operand: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """`count` uneven, mixed-sign addends whose sum is `value` (exactly for integers)."""
    if count == 1:
        return [value.copy()]
    dtype = value.dtype
    if dtype == np.bool_:
        return _owned(value, count, operand, np.zeros_like(value))
    if dtype.kind in "iu":
        low = 0 if dtype.kind == "u" else -7
        shares = [rng.integers(low, 8, size=value.shape).astype(dtype) for _ in range(count - 1)]
        with np.errstate(all="ignore"):
            last = (value - np.sum(shares, axis=0, dtype=dtype)).astype(dtype)
        return [last, *shares] if operand % 2 else [*shares, last]
    wide = value.astype(np.float64)
    noise = rng.standard_normal((count, *value.shape)) * (1.5 + np.abs(wide))
    noise -= noise.mean(axis=0)
    parts = _share(operand, count).reshape((count,) + (1,) * value.ndim) * wide + noise
    cast = [p.astype(dtype) for p in parts[:-1]]
    last = wide - np.sum([c.astype(np.float64) for c in cast], axis=0)
    return [*cast, last.astype(dtype)]


def extremum_addends(
    value: np.ndarray, count: int, reduction: str, operand: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """`count` addends whose `reduction` ("max" or "min") is `value`; element e is owned by
    device (e + operand) mod count, every other device is strictly below (max) or above (min)."""
    if count == 1:
        return [value.copy()]
    if value.dtype == np.bool_:
        other = np.zeros_like(value) if reduction == "max" else np.ones_like(value)
        return _owned(value, count, operand, other)
    direction = -1.0 if reduction == "max" else 1.0
    wide = value.astype(np.float64)
    result = []
    for device in range(count):
        offset = 1.0 + rng.random(value.shape) * (1.0 + np.abs(wide))
        if value.dtype.kind in "iu":
            offset = np.ceil(offset)
        moved = (wide + direction * offset).astype(value.dtype)
        result.append(np.where(_owners(value.shape, count, operand) == device, value, moved))
    return result


def _owners(shape: tuple[int, ...], count: int, operand: int) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) + operand) % count


def _owned(value: np.ndarray, count: int, operand: int, other: np.ndarray) -> list[np.ndarray]:
    owners = _owners(value.shape, count, operand)
    return [np.where(owners == device, value, other) for device in range(count)]


def addends(
    value: np.ndarray, count: int, reduction: str, operand: int, rng: np.random.Generator
) -> list[np.ndarray]:
    if reduction == "sum":
        return sum_addends(value, count, operand, rng)
    if reduction in ("max", "min"):
        return extremum_addends(value, count, reduction, operand, rng)
    raise EvalError(f"validator: no addend generator for Partial({reduction})")


def place(
    value: np.ndarray, type_: TensorType, operand: int, rng: np.random.Generator
) -> dict[Coord, np.ndarray]:
    """Each device's local array of the global `value` under `type_`'s ShardLayout: its block,
    split into addends along every Partial mesh axis (innermost mesh axis first).

    The split along a Partial mesh axis is seeded by the coordinates of the Partial axes already
    split and nothing else, so the devices that must share one split of a value (along that axis,
    and the replicas along Broadcast axes) draw it alike.
    """
    layout = type_.layout
    if not isinstance(layout, ShardLayout):
        raise EvalError("validator: place() needs a ShardLayout type")
    mesh = layout.mesh
    coords = devices(mesh)
    partial = [(m, a.reduction) for m, a in enumerate(layout.attrs) if isinstance(a, Partial)]
    result: dict[Coord, np.ndarray] = {}
    base = [int(x) for x in rng.integers(0, 2**31, size=2)]
    splits: dict[tuple, list[np.ndarray]] = {}
    for coord in coords:
        per_axis = axis_indices(type_, value.shape, coord, "validator")
        held = np.asarray(value[as_index(per_axis, value.shape)])
        done: list[int] = []
        for mesh_axis, reduction in reversed(partial):
            group = (index_key(per_axis), mesh_axis, *done)
            if group not in splits:
                draw = np.random.default_rng([*base, operand, mesh_axis, *done])
                splits[group] = addends(held, mesh.shape[mesh_axis], reduction, operand, draw)
            held = splits[group][coord[mesh_axis]]
            done.append(coord[mesh_axis])
        result[coord] = np.array(held, copy=True)
    return result
