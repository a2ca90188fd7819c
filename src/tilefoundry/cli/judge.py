"""The oracle judge of `tilefoundry run`: does a backend's output equal the reference oracle's?

Judged element by element, so no entry can hide an error in another:

- NaN equals NaN (both NaN at the same index); NaN against a number is a difference.
- An infinity must match exactly: the same sign at the same index.
- Finite values agree when `|got - want| <= atol * scale + rtol * |want|`, with `rtol`/`atol` per
  dtype (`TOLERANCES`, the narrower of the two dtypes) unless given. `scale` is the median
  magnitude of the oracle's finite values (at least 1): backends sum in different orders, so an
  entry near zero that is the difference of typical-size terms carries an absolute error of that
  typical size; a median is not moved by a few huge entries, so an oracle entry of 1e30 does not
  excuse an error of 1e25 elsewhere.
- Integers and booleans must be equal.
- Shapes must be equal.

The verdict keeps the worst elements (largest excess over their allowance) for the message.

XLA's CPU runtime reads subnormal f32/f64/bf16 values as zeros (docs/numerics.md). A backend that
disagrees on inputs holding subnormals is judged once more against the oracle run on the inputs
with those flushed (`flush_subnormals`); agreement there is that documented difference, reported
as such, not a wrong result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-9),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-2),
    "bfloat16": (5e-2, 5e-2),
}
"""(rtol, atol) by float dtype. The 1-byte floats (fp8, f8e8m0) and anything not listed: a
quarter (their mantissas have 3 bits or none, so one rounding step is 1/8 or more)."""
NARROW_TOLERANCE = (0.25, 0.25)
WORST_SHOWN = 5
CHUNK = 1 << 16
"""Elements judged at a time (512 KiB per float64 temporary)."""


@dataclass(frozen=True)
class Mismatch:
    """One element that differs: which output, where, the two values, and what was allowed."""

    output: int
    index: tuple[int, ...]
    got: float
    want: float
    allowed: float

    def __str__(self) -> str:
        where = f"out{self.output}[{', '.join(map(str, self.index))}]"
        allowed = f"allowed ±{self.allowed:.3g}"
        return f"{where}: got {self.got:.6g}, expected {self.want:.6g} ({allowed})"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    max_abs_diff: float
    mismatches: int = 0
    worst: tuple[Mismatch, ...] = ()
    problems: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        """One line per problem and per worst element, for the disagreement message."""
        lines = list(self.problems)
        if self.mismatches:
            lines.append(f"{self.mismatches} element(s) differ; the worst:")
            lines.extend(f"  {m}" for m in self.worst)
        return "\n".join(lines)


FLUSHED_BY_XLA_CPU = ("float32", "float64", "bfloat16")
"""The dtypes whose subnormals XLA's CPU runtime reads as zero (bf16 computes in f32; an f16
subnormal is a normal f32)."""


def flush_subnormals(arrays: list[np.ndarray]) -> list[np.ndarray] | None:
    """`arrays` with every subnormal of a FLUSHED_BY_XLA_CPU dtype a zero of its sign, as XLA's
    CPU runtime reads them; None when no array holds one."""
    arrays = [np.asarray(a) for a in arrays]
    flushed = [_flushed(a) for a in arrays]
    return None if all(f is a for f, a in zip(flushed, arrays, strict=True)) else flushed


def _flushed(array: np.ndarray) -> np.ndarray:
    if array.dtype.name not in FLUSHED_BY_XLA_CPU:
        return array
    smallest_normal = array.dtype.type(ml_dtypes.finfo(array.dtype).smallest_normal)
    subnormal = (array != 0) & (np.abs(array) < smallest_normal)
    return np.where(subnormal, array * 0, array) if subnormal.any() else array  # keeps the sign


def tolerance(got: np.dtype, want: np.dtype) -> tuple[float, float]:
    """The (rtol, atol) default of the narrower float dtype of the pair."""
    floats = [d for d in (got, want) if d.kind in "fcV"]
    narrow = min(floats, key=lambda d: d.itemsize)
    return TOLERANCES.get(narrow.name, NARROW_TOLERANCE)


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fcV"  # V: ml_dtypes' narrow floats


def chunks(array: np.ndarray):
    """`(start, block)` over `array` in C order, blocks of at most `CHUNK` elements: the judge
    and the summaries need float64 arithmetic, and a float64 copy of a whole output would take
    2-8 times the memory the run was admitted with."""
    flat = array.reshape(-1)  # a view, unless the array is not contiguous
    for start in range(0, flat.size, CHUNK):
        yield start, flat[start : start + CHUNK]


def float64_chunks(array: np.ndarray):
    for start, block in chunks(array):
        yield start, block.astype(np.float64)


def judge(
    got: list[np.ndarray],
    want: list[np.ndarray],
    rtol: float | None = None,
    atol: float | None = None,
) -> Verdict:
    """Compare each output with the oracle's (same count and order)."""
    problems: list[str] = []
    if len(got) != len(want):
        problems.append(f"the backend gave {len(got)} output(s), the oracle {len(want)}")
    worst_diff, count, worst = 0.0, 0, []
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            problems.append(f"out{i}: shape {a.shape}, expected {b.shape}")
            continue
        tolerances = None
        if _is_float(a.dtype) or _is_float(b.dtype):
            rt, at = tolerance(a.dtype, b.dtype)
            tolerances = (rt if rtol is None else rtol, at if atol is None else atol, _scale(b))
        for (start, a_block), (_, b_block) in zip(chunks(a), chunks(b), strict=True):
            a64, b64 = a_block.astype(np.float64), b_block.astype(np.float64)
            if tolerances is None:  # integers and booleans compare exactly, in their own dtype
                bad = a_block != b_block
                diff = np.abs(a64 - b64)
                allowed = np.zeros(a64.shape)
            else:
                bad, diff, allowed = _float_mismatches(a64, b64, *tolerances)
            finite_diff = diff[np.isfinite(diff)]
            if finite_diff.size:
                worst_diff = max(worst_diff, float(finite_diff.max()))
            if bad.any():
                worst_diff = max(worst_diff, float(np.max(np.where(bad, diff, 0.0))))
            count += int(bad.sum())
            worst.extend(_worst_of(i, a.shape, start, bad, diff - allowed, a64, b64, allowed))
            worst = sorted(worst, key=lambda pair: -pair[0])[:WORST_SHOWN]
    shown = tuple(m for _, m in worst)
    return Verdict(not problems and not count, worst_diff, count, shown, tuple(problems))


def _scale(want: np.ndarray) -> float:
    """The median magnitude of the oracle's finite values (at least 1), from one copy of them
    in their own dtype, partitioned in place; the two middle values are averaged in float64."""
    if _is_float(want.dtype):
        finite, count = np.empty(want.size, want.dtype), 0
        for _, block in chunks(want):
            kept = block[np.isfinite(block)]
            finite[count : count + kept.size] = kept
            count += kept.size
        finite = finite[:count]
    else:  # an integer oracle against a float result: |int8(-128)| needs a wider type
        finite = want.astype(np.float64).reshape(-1)
    np.abs(finite, out=finite)
    if not finite.size:
        return 1.0
    low, high = (finite.size - 1) // 2, finite.size // 2
    finite.partition((low, high))
    return max(1.0, (float(finite[low]) + float(finite[high])) / 2)


def _float_mismatches(a64: np.ndarray, b64: np.ndarray, rtol: float, atol: float, scale: float):
    """Per element: (differs, |diff|, allowance) with NaN == NaN and exact infinities."""
    allowed = atol * scale + rtol * np.where(np.isfinite(b64), np.abs(b64), 0.0)
    both_finite = np.isfinite(a64) & np.isfinite(b64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(both_finite, np.abs(a64 - b64), np.inf)
    same_nan = np.isnan(a64) & np.isnan(b64)
    same_inf = np.isinf(a64) & (a64 == b64)
    diff = np.where(same_nan | same_inf, 0.0, diff)
    bad = ~(same_nan | same_inf) & ~(both_finite & (diff <= allowed))
    return bad, diff, allowed


def _worst_of(
    output: int, shape, start: int, bad, excess, a64, b64, allowed
) -> list[tuple[float, Mismatch]]:
    """The worst elements of one chunk (flat offsets from `start` in an array of `shape`)."""
    if not bad.any():
        return []
    flat = np.flatnonzero(bad)
    order = flat[np.argsort(-excess[flat], kind="stable")][:WORST_SHOWN]
    out = []
    for k in order:
        index = tuple(int(j) for j in np.unravel_index(start + int(k), shape))
        mismatch = Mismatch(output, index, float(a64[k]), float(b64[k]), float(allowed[k]))
        out.append((float(excess[k]), mismatch))
    return out
