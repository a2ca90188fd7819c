"""The validator's engine: input-state combinations, placed runs, completion and comparison.

`validate.py` drives it over the catalog and prints the report. A check completes the result
through the type typeinfer claimed: Splits are gathered, Partials reduced with the claimed
reduction, Broadcast replicas compared exactly (a disagreement is a refutation), and the global
value compared with the unsharded run within a dtype-appropriate tolerance.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import product

import numpy as np

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.evaluator.single_op import run_op
from tilefoundry.evaluator.validation_inputs import (
    REDRAWS,
    draw_truth,
    is_uninformative,
    place,
    sign_flipped,
)
from tilefoundry.evaluator.values import (
    EVALUATOR,
    DivergentReplicas,
    MeshValue,
    gather,
    same_values,
)
from tilefoundry.ir.types import TupleType, Type, make_shard_tensor_type
from tilefoundry.ir.types import make_tensor_type as plain_type
from tilefoundry.ir.types.shard import B, Mesh, P, ShardLayout, Split, make_mesh
from tilefoundry.rules.validation_samples import Operand, Sample
from tilefoundry.sharding.shard_reading import canonical_splits

REDUCTIONS = ("sum", "max", "min")
_TOLERANCE = {"float64": 1e-9, "float32": 2e-4, "float16": 2e-2, "bfloat16": 6e-2}


@dataclass(frozen=True)
class Finding:
    op: str
    sample: str
    mesh: str
    inputs: str
    claimed: str
    detail: str


@dataclass
class Tally:
    samples: int = 0
    combinations: int = 0
    accepted: int = 0
    rejected: int = 0
    unsound: int = 0
    missed: int = 0
    not_executable: int = 0
    no_cotangent: int = 0
    untyped: int = 0


@dataclass
class Report:
    tallies: dict[str, Tally] = field(default_factory=dict)
    unsound: list[Finding] = field(default_factory=list)
    missed: list[Finding] = field(default_factory=list)
    not_executable: list[Finding] = field(default_factory=list)
    broken_samples: list[Finding] = field(default_factory=list)
    untyped: list[Finding] = field(default_factory=list)
    not_sampled: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """CI settings keep the run short; `--full` adds the extent-2 mesh, the non-CI samples and
    more combinations per sample."""

    seed: int = 0
    full: bool = False
    samples: int | None = None
    vjp: bool = False

    @property
    def reductions(self) -> tuple[str, ...]:
        """The Partial input states tried: VJP mode leaves out max|min, which the transform
        refuses to differentiate through (DESIGN §4.18: complete them first)."""
        return ("sum",) if self.vjp else REDUCTIONS

    @property
    def meshes(self) -> tuple[Mesh, ...]:
        flat = (make_mesh((4,), ("x",)),) + ((make_mesh((2,), ("x",)),) if self.full else ())
        return (*flat, make_mesh((2, 2), ("a", "b")))

    def cap(self, mesh: Mesh) -> int:
        """Combinations per sample and mesh. A 1-axis mesh enumerates every combination of the
        small samples; the 2-axis mesh (states per mesh axis multiply) and many-operand ops
        take a seeded subset."""
        if mesh.rank == 1:
            return 400 if self.full else 64
        return 96 if self.full else 24


# -- states and types --------------------------------------------------------------------------


def _axis_states(rank: int, states: str, reductions: Sequence[str]) -> list:
    placed = [B, *(Split(k) for k in range(rank))]
    return placed + [P(r) for r in reductions] if states == "all" else placed


def slot_options(
    slot: Operand, mesh: Mesh, reductions: Sequence[str]
) -> list[tuple[tuple | None, Type]]:
    """Each input state of one operand that is a valid type on `mesh`, with that type."""
    if slot.states == "plain":
        return [(None, plain_type(slot.shape, slot.dtype))]
    options = []
    states = _axis_states(len(slot.shape), slot.states, reductions)
    for attrs in product(states, repeat=mesh.rank):
        try:
            options.append(
                (attrs, make_shard_tensor_type(slot.shape, slot.dtype, mesh=mesh, attrs=attrs))
            )
        except VerifyError:
            continue
    return options


def _combinations(sample: Sample, mesh: Mesh, settings: Settings, rng) -> list[tuple]:
    """Every input-state combination, or a seeded subset of `settings.cap(mesh)` of them."""
    options = [slot_options(slot, mesh, settings.reductions) for slot in sample.slots()]
    combos = list(product(*options))
    if len(combos) <= settings.cap(mesh):
        return combos
    picked = rng.choice(len(combos), size=settings.cap(mesh), replace=False)
    return [combos[i] for i in sorted(picked)]


def state_text(attrs: tuple | None) -> str:
    if attrs is None:
        return "plain"
    text = [f"S{a.axis}" if isinstance(a, Split) else _attr_text(a) for a in attrs]
    return text[0] if len(text) == 1 else f"({','.join(text)})"


def _attr_text(attr) -> str:
    return "B" if attr == B else f"P({attr.reduction})"


def type_state(type_: Type) -> str:
    """A claimed output's per-mesh-axis state, Splits named by logical axis as the inputs are."""
    if isinstance(type_, TupleType):
        return "(" + ", ".join(type_state(f) for f in type_.fields) + ")"
    if not isinstance(getattr(type_, "layout", None), ShardLayout):
        return "plain"
    try:
        splits = canonical_splits(type_, "validator", EVALUATOR)
        logical = {m: axis for axis, ms in splits.items() for m in ms}
    except VerifyError:
        return str(type_.layout.attrs)
    attrs = type_.layout.attrs
    return state_text(tuple(Split(logical[m]) if m in logical else a for m, a in enumerate(attrs)))


# -- execution and comparison --------------------------------------------------------------------


def mismatch(got: np.ndarray, want: np.ndarray, floor: float = 0.0) -> str | None:
    """None when `got` matches `want` within the dtype's tolerance (at least `floor`), else
    what differs."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != {list(want.shape)}"
    if want.dtype.kind in "biu" or want.dtype.name not in _TOLERANCE:
        return None if same_values(got, want) else "values differ (exact dtype)"
    g, w = got.astype(np.float64), want.astype(np.float64)
    tolerance = max(_TOLERANCE[want.dtype.name], floor)
    scale = max(1.0, float(np.nanmax(np.abs(w), initial=0.0)))
    if np.allclose(g, w, rtol=tolerance, atol=tolerance * scale, equal_nan=True):
        return None
    nan = int((np.isnan(g) & ~np.isnan(w)).sum())
    if nan:
        return f"NaN in {nan} of {w.size} elements where the unsharded result has a number"
    with np.errstate(invalid="ignore"):
        error = np.nanmax(np.abs(g - w), initial=0.0)
    return f"max |error| {error:.3g} (tolerance {tolerance:g} x scale {scale:.3g})"


def _refutation(result, truth, floor: float = 0.0) -> str | None:
    """Complete each result leaf through its own (claimed) type and compare with the truth."""
    if isinstance(truth, tuple):
        for index, (leaf, want) in enumerate(zip(result, truth, strict=True)):
            why = _refutation(leaf, want, floor)
            if why:
                return f"result {index}: {why}"
        return None
    if isinstance(result, MeshValue):
        if not result.sharded:
            shards = list(result.shards.values())
            if not all(same_values(shards[0], s) for s in shards[1:]):
                return "the plain result differs across devices"
            return mismatch(shards[0], truth, floor)
        try:
            result = gather(result, "validator", complete_partials=True)
        except Exception as err:
            return f"the shards do not complete to the claimed state: {type(err).__name__}: {err}"
    return mismatch(result, truth, floor)


def _addend_rounding(combo) -> float:
    """The tolerance of the coarsest float operand placed as Partial(sum): its addends are
    rounded in its own dtype, so they sum to its value only that closely, even where the
    result is wider (a widening Cast)."""
    floors = [
        _TOLERANCE.get(type_.dtype.to_numpy().name, 0.0)
        for attrs, type_ in combo
        if attrs is not None and any(a == P("sum") for a in attrs) and type_.dtype.is_float
    ]
    return max(floors, default=0.0)


def judged(
    execute: Callable[[], object], truth, flip: int, floor: float = 0.0
) -> tuple[str, str] | None:
    """("refuted"|"unexecutable", detail) when `execute()`'s result, completed through its
    claimed types, is not `truth` within the tolerance (at least `floor`; `flip`: the
    sign-flipped rerun); None when it is."""
    note = "sign-flipped: " if flip else ""
    try:
        result = execute()
    except DivergentReplicas as err:
        return "refuted", note + str(err)
    except (VerifyError, EvalError) as err:
        return "unexecutable", f"{type(err).__name__}: {err}"
    except Exception as err:
        return "unexecutable", f"crash {type(err).__name__}: {err}"
    why = _refutation(result, truth, floor)
    return ("refuted", note + why) if why else None


def _leaves(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _global(value):
    if isinstance(value, tuple):
        return tuple(_global(v) for v in value)
    if isinstance(value, MeshValue):
        return gather(value, "validator", complete_partials=True)
    return np.asarray(value)


def _candidates(ref_type: Type, mesh: Mesh) -> Iterator[tuple[str, Type]]:
    """Output types to try for a rejected combination: one state for every result field."""
    fields = ref_type.fields if isinstance(ref_type, TupleType) else (ref_type,)
    rank = min(len(f.shape) for f in fields)
    # a pending sum of booleans means nothing (max/min are or/and and do)
    reductions = [
        r for r in REDUCTIONS if not (r == "sum" and any(f.dtype.is_bool for f in fields))
    ]
    for state in [B, *(Split(k) for k in range(rank)), *(P(r) for r in reductions)]:
        try:
            typed = [
                make_shard_tensor_type(f.shape, f.dtype, mesh=mesh, attrs=(state,)) for f in fields
            ]
        except VerifyError:
            continue
        yield state_text((state,)), TupleType(tuple(typed)) if len(typed) > 1 else typed[0]


def _unplaced(type_: Type) -> Type:
    """`type_` with every field's layout dropped: what the unsharded run computes."""
    if isinstance(type_, TupleType):
        return TupleType(tuple(_unplaced(f) for f in type_.fields))
    return plain_type(type_.shape, type_.dtype, type_.storage)


def _constant(truth: object) -> bool:
    """Whether every element of the unsharded result is the same value (then it proves nothing
    about which output state is right)."""
    leaves = truth if isinstance(truth, tuple) else (truth,)
    for leaf in leaves:
        flat = np.asarray(leaf).reshape(-1)
        if flat.size and not np.all(flat == flat[0]):
            return False
    return True


# -- the driver -----------------------------------------------------------------------------------


def _rng(seed: int, *key) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


class SampleRun:
    """One sample on one mesh: its reference truth and every input combination."""

    def __init__(self, name, label, sample, mesh, settings, report):
        self.name, self.label, self.sample, self.mesh = name, label, sample, mesh
        self.settings, self.report = settings, report
        self.tally = report.tallies.setdefault(name, Tally())
        self.slots = sample.slots()
        self.mesh_text = "x".join(str(e) for e in mesh.shape)

    def finding(self, combo, claimed: str, detail: str) -> Finding:
        inputs = ", ".join(state_text(attrs) for attrs, _ in combo)
        return Finding(self.name, self.label, self.mesh_text, inputs, claimed, detail)

    def truths(self) -> list[tuple[list[np.ndarray], object]] | None:
        """Inputs and unsharded result, plain and sign-flipped; an all-zero result is redrawn
        (unless the op has no operand to redraw: then its constant result is the claim). The
        unsharded result is the op's kernel on global arrays with a plain result type, even
        where the op places its result itself (Reshard's and Zeros' `layout=`)."""
        plain = [plain_type(s.shape, s.dtype) for s in self.slots]
        op = self.sample.op_for(self.mesh)
        try:
            self.ref_type = typeinfer_call(op, *self.sample.nest(plain, TupleType))
            unsharded = _unplaced(self.ref_type)
            for attempt in range(REDRAWS):
                rng = _rng(self.settings.seed, self.name, self.label, attempt)
                values = [
                    draw_truth(s.shape, s.dtype.to_numpy(), s.domain, rng) for s in self.slots
                ]
                truth = _global(
                    run_op(
                        op, self.sample.nest(plain, TupleType), unsharded, self.sample.nest(values)
                    )
                )
                if not self.slots or not any(is_uninformative(t) for t in _leaves(truth)):
                    break
            else:
                raise EvalError(f"{REDRAWS} draws gave an all-zero unsharded result")
        except Exception as err:
            self.report.broken_samples.append(self.finding((), "-", f"{type(err).__name__}: {err}"))
            return None
        flipped = [sign_flipped(v, s.domain) for v, s in zip(values, self.slots, strict=True)]
        flipped_truth = _global(
            run_op(op, self.sample.nest(plain, TupleType), unsharded, self.sample.nest(flipped))
        )
        return [(values, truth), (flipped, flipped_truth)]

    def placed(self, combo, variants, key) -> list[tuple[tuple, object]]:
        """Per variant, the arguments placed in `combo`'s states (drawn once, shared by every
        output type tried), and the unsharded truth."""
        result = []
        for flip, (values, truth) in enumerate(variants):
            rng = _rng(self.settings.seed, *key, flip)
            leaves = [
                value
                if attrs is None
                else MeshValue(self.mesh, type_, value.shape, place(value, type_, index, rng))
                for index, ((attrs, type_), value) in enumerate(zip(combo, values, strict=True))
            ]
            result.append((self.sample.nest(leaves), truth))
        return result

    def check(self, combo, out_type, placed) -> tuple[str, str | None]:
        """("ok"|"refuted"|"unexecutable", detail) over both variants."""
        op, arg_types = (
            self.sample.op_for(self.mesh),
            self.sample.nest([t for _, t in combo], TupleType),
        )
        for flip, (args, truth) in enumerate(placed):
            execute = partial(run_op, op, arg_types, out_type, args)
            found = judged(execute, truth, flip, _addend_rounding(combo))
            if found:
                return found
        return "ok", None

    def run(self) -> None:
        variants = self.truths()
        if variants is None:
            return
        rng = _rng(self.settings.seed, self.name, self.label, self.mesh_text, "combos")
        for index, combo in enumerate(_combinations(self.sample, self.mesh, self.settings, rng)):
            key = (self.name, self.label, self.mesh_text, index)
            self.tally.combinations += 1
            try:
                claimed = typeinfer_call(
                    self.sample.op_for(self.mesh),
                    *self.sample.nest([t for _, t in combo], TupleType),
                )
            except VerifyError:
                self.tally.rejected += 1
                self.missed(combo, variants, key)
                continue
            self.tally.accepted += 1
            verdict, detail = self.check(combo, claimed, self.placed(combo, variants, key))
            if verdict == "refuted":
                self.tally.unsound += 1
                self.report.unsound.append(self.finding(combo, type_state(claimed), detail))
            elif verdict == "unexecutable":
                self.tally.not_executable += 1
                self.report.not_executable.append(self.finding(combo, type_state(claimed), detail))

    def missed(self, combo, variants, key) -> None:
        if self.mesh.rank != 1 or all(attrs in (None, (B,)) for attrs, _ in combo):
            return
        if any(_constant(truth) for _, truth in variants):
            return  # a constant truth (e.g. an all-False comparison) agrees with any state
        placed = self.placed(combo, variants, key)
        agreeing = [
            text
            for text, out_type in _candidates(self.ref_type, self.mesh)
            if self.check(combo, out_type, placed)[0] == "ok"
        ]
        if agreeing:
            self.tally.missed += 1
            self.report.missed.append(self.finding(combo, " | ".join(agreeing), "rejected"))
