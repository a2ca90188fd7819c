"""The SPMD exit against the mesh simulation, op by op (run inside the worker of tests/conftest.py).

Built like the sharding-rule validator (`evaluator/validate.py`): every op sample its module
registers (VALIDATION_SAMPLES), on the validator's meshes (4 devices in a row, and 2x2), in
per-mesh-axis input states (Broadcast, Split of each logical axis, Partial sum|max|min) that
typeinfer accepts. Each accepted combination becomes a small program: its operands are
parameters in those states, the op is called once, and a pending Partial result is completed by
a Reshard to Broadcast. The program runs on the reference evaluator's mesh simulation and through
the SPMD exit on XLA devices, and the two results must agree (DESIGN §4.12: the exit computes
what the simulation computes).

Two boundary facts shape the programs, and every case they exclude is counted, never dropped:
- a Partial parameter's addends are the exit's own split of the value the caller passes (the
  value on coordinate 0, zeros elsewhere), so, to read uneven addends, a Partial(sum) operand
  is made in the program by a producer, a MatMul whose contraction axis is
  Split over exactly those mesh axes (its other Splits carried): the op then reads true addends;
- no op makes a pending max or min from complete values (Reduce completes its own), so a
  Partial(max|min) operand is a parameter: the exit gives every device the value itself (max
  and min are idempotent), the simulator its own uneven addends; the two must still agree, which
  checks the op's rule for a pending max/min and its completion, though a rule that read a
  pending max as complete would pass on the exit's side. An operand pending both a sum and a
  max has neither producer and is skipped with that reason.

The product of states is large (and typeinfer alone costs ~10 ms a call), so each op and mesh
gets a seeded sample of accepted combinations (`PER_OP`); combinations of one mesh are batched
into a few programs so that XLA compiles a handful of modules, not hundreds.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from tilefoundry.analysis import TypeInferContext, typeinfer_call
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.evaluator.validate import catalog_samples
from tilefoundry.evaluator.validation_checks import (
    REDUCTIONS,
    Settings,
    mismatch,
    slot_options,
    state_text,
    type_state,
)
from tilefoundry.evaluator.validation_inputs import draw_truth
from tilefoundry.ir.core import Call, Expr, Tuple, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.hir.sharding import Reshard
from tilefoundry.ir.hir.tensor import TupleGetItem
from tilefoundry.ir.types import TensorType, TupleType, make_shard_tensor_type
from tilefoundry.ir.types.shard import B, Mesh, Partial, ShardLayout, Split
from tilefoundry.rules.validation_samples import Sample
from tilefoundry.sharding.shard_reading import canonical_splits, pending_partials

MESHES: tuple[Mesh, ...] = Settings().meshes
PER_OP = {1: 10, 2: 8}
"""Accepted combinations sampled per op, on a mesh of that rank."""
TRIES_PER_CASE = 6
"""Draws per wanted combination before an op and mesh give up (most draws are rejected)."""
BATCH = 64
"""Combinations per emitted program."""
MIXED_PENDING = "an operand pending both a sum and a max or min: no producer makes it"


REFUSED_UP_FRONT: dict[str, str] = {
    "an inner factor": (
        "a Split on an inner factor of a logical axis gives each device a strided share; the "
        "mesh simulation holds one, but Shardy shardings and the exit's block cuts are "
        "contiguous, so the exit refuses it while lowering, naming the op (DESIGN §1 allows "
        "an exit to refuse up front)"
    ),
}
"""Exit refusals that are not failures, by a phrase of the message, each with why (sorted). Any
other exit refusal of a combination the simulator runs is a failure."""


@dataclass
class Case:
    op: str
    label: str
    sample: Sample
    mesh: Mesh
    combo: tuple  # per slot: (attrs or None, type)

    @property
    def text(self) -> str:
        states = ", ".join(state_text(attrs) for attrs, _ in self.combo)
        mesh = "x".join(str(e) for e in self.mesh.shape)
        return f"{self.op} [{self.label}] mesh {mesh}: ({states})"


@dataclass
class Tally:
    cases: int = 0
    agreed: int = 0
    skipped: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    sim_refusals: list[str] = field(default_factory=list)
    exit_refusals: list[str] = field(default_factory=list)
    programs: int = 0
    per_op: Counter = field(default_factory=Counter)


def _rng(seed: int, *key) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(repr(key).encode())])


# ---- choosing combinations ----------------------------------------------------------------


def _replicated(attrs) -> bool:
    return attrs is None or all(a == B for a in attrs)


def _draw_combo(slots: list[list], rng: np.random.Generator) -> tuple:
    """One state per slot. Most ops accept few independent states at once, so a uniform draw
    over many operands is nearly always rejected: a third of the time a slot repeats the state
    of an earlier slot of the same rank (ops that want operands split alike: Concat,
    InsertSlice), half of the rest it is replicated, else it is any state."""
    combo: list = []
    for options in slots:
        by_attrs = {attrs: (attrs, type_) for attrs, type_ in options}
        earlier = [c for c in combo if c[0] is not None and c[0] in by_attrs]
        replicated = [o for o in options if _replicated(o[0])]
        roll = rng.random()
        if earlier and roll < 1 / 3:
            combo.append(by_attrs[earlier[int(rng.integers(len(earlier)))][0]])
        elif replicated and roll < 2 / 3:
            combo.append(replicated[int(rng.integers(len(replicated)))])
        else:
            combo.append(options[int(rng.integers(len(options)))])
    return tuple(combo)


def choose_cases(seed: int, skipped: Counter) -> list[Case]:
    """The sampled accepted combinations; those no program can express are counted in
    `skipped` by reason (they do not use up an op's share)."""
    samples, _ = catalog_samples()
    cases = []
    for name in sorted(samples):
        chosen = [s for s in samples[name] if s.ci]
        for mesh in MESHES:
            cases += _cases_for(name, chosen, mesh, _rng(seed, name, mesh.shape), skipped)
    return cases


def _cases_for(name: str, samples: list[Sample], mesh: Mesh, rng, skipped: Counter) -> list[Case]:
    wanted = PER_OP[mesh.rank]
    options = [[slot_options(slot, mesh, REDUCTIONS) for slot in s.slots()] for s in samples]
    seen, found = set(), []
    for attempt in range(wanted * TRIES_PER_CASE):
        if len(found) == wanted:
            break
        index = attempt % len(samples)
        sample = samples[index]
        combo = _draw_combo(options[index], rng)
        key = (index, tuple(attrs for attrs, _ in combo))
        if key in seen or (combo and all(_replicated(attrs) for attrs, _ in combo)):
            continue  # an all-replicated call does not touch the mesh (an operand-free op's
            # own result state does: Zeros placed on it)
        seen.add(key)
        op = sample.op_for(mesh)
        try:
            typeinfer_call(op, *sample.nest([t for _, t in combo], TupleType))
        except VerifyError:
            continue
        found.append(Case(name, sample.label or "sample", sample, mesh, combo))
    return found


# ---- building the program of one case -------------------------------------------------------


class Skip(Exception):
    """A case no program can express at the exit boundary; its message is the counted reason."""


def _typed(expr: Expr) -> Expr:
    TypeInferContext().infer(expr)
    return expr


def _producer(type_: TensorType, mesh: Mesh, name: str, rng) -> tuple[list, Expr]:
    """(params with values, an expression of `type_`'s per-mesh-axis state) for a Partial(sum)
    operand: lhs @ rhs with the contraction axis Split over the Partial mesh axes."""
    partials = pending_partials(type_)
    if any(r != "sum" for r in partials.values()):
        raise Skip(MIXED_PENDING)
    shape = tuple(type_.shape)
    if not shape:
        raise Skip("Partial(sum) rank-0 operand: no matmul producer")
    state = _logical_state(type_)
    k = int(np.prod([mesh.shape[m] for m in partials])) * 2
    last = len(shape) - 1
    lhs_shape, rhs_shape = (*shape[:-1], k), (k, shape[-1])
    lhs_attrs, rhs_attrs = [], []
    for m, attr in enumerate(state):
        if m in partials:
            lhs_attrs.append(Split(len(lhs_shape) - 1))
            rhs_attrs.append(Split(0))
        elif isinstance(attr, Split) and attr.axis == last:
            lhs_attrs.append(B)
            rhs_attrs.append(Split(1))
        else:
            lhs_attrs.append(attr)
            rhs_attrs.append(B)
    try:
        lhs_type = make_shard_tensor_type(lhs_shape, type_.dtype, mesh=mesh, attrs=lhs_attrs)
        rhs_type = make_shard_tensor_type(rhs_shape, type_.dtype, mesh=mesh, attrs=rhs_attrs)
        lhs, rhs = Var(f"{name}_lhs", lhs_type), Var(f"{name}_rhs", rhs_type)
        product = _typed(Call(MatMul(), (lhs, rhs)))
    except VerifyError as err:
        raise Skip(f"Partial(sum) operand: no matmul producer ({err.message[:60]})") from None
    if type_state(product.type) != type_state(type_):
        raise Skip("Partial(sum) operand: the matmul producer gives another state")
    values = [_values(lhs_type, rng), _values(rhs_type, rng)]
    return [(lhs, values[0]), (rhs, values[1])], product


def _logical_state(type_: TensorType) -> tuple:
    """Per mesh axis: B, P(r), or Split(logical axis) (as the validator's attrs name them)."""
    splits = canonical_splits(type_, "spmd property", "the test")
    logical = {m: axis for axis, ms in splits.items() for m in ms}
    return tuple(Split(logical[m]) if m in logical else a for m, a in enumerate(type_.layout.attrs))


def _values(type_: TensorType, rng) -> np.ndarray:
    return rng.standard_normal(tuple(type_.shape)).astype(type_.dtype.to_numpy())


def _completed(expr: Expr) -> list[Expr]:
    """The result leaves, each Partial completed in the program by a Reshard to Broadcast."""
    if isinstance(expr.type, TupleType):
        leaves = []
        for index in range(len(expr.type.fields)):
            leaves += _completed(_typed(Call(TupleGetItem(index=index), (expr,))))
        return leaves
    partials = pending_partials(expr.type)
    if not partials:
        return [expr]
    layout = expr.type.layout
    attrs = tuple(B if isinstance(a, Partial) else a for a in layout.attrs)
    target = ShardLayout(layout.layout, attrs, layout.mesh)
    return [_typed(Call(Reshard(layout=target), (expr,)))]


def build(case: Case, index: int, seed: int) -> tuple[list, list[Expr]]:
    """The case's parameters (with their values) and its result leaves."""
    rng = _rng(seed, case.text, "values")
    params, args = [], []
    for slot_index, ((attrs, type_), slot) in enumerate(
        zip(case.combo, case.sample.slots(), strict=True)
    ):
        name = f"c{index}_{slot_index}"
        pending = [a.reduction for a in attrs or () if isinstance(a, Partial)]
        if "sum" in pending:  # a pending max or min alone stays a parameter (module docstring)
            made, expr = _producer(type_, case.mesh, name, rng)
            params += made
            args.append(expr)
            continue
        var = Var(name, type_)
        value = draw_truth(slot.shape, slot.dtype.to_numpy(), slot.domain, rng)
        params.append((var, value))
        args.append(var)
    nested = case.sample.nest(args, lambda fields: _typed(Tuple(fields)))
    call = _typed(Call(case.sample.op_for(case.mesh), nested))
    return params, _completed(call)


def program(name: str, parts: list[tuple[list, list[Expr]]]) -> tuple[Function, list, list]:
    """One function over every part's parameters returning every part's leaves."""
    params = [p for made, _ in parts for p, _ in made]
    values = [v for made, _ in parts for _, v in made]
    leaves = [leaf for _, result in parts for leaf in result]
    body = leaves[0] if len(leaves) == 1 else _typed(Tuple(tuple(leaves)))
    fn = Function(name, tuple(params), body, body.type)
    _typed(fn)
    return fn, values, [len(result) for _, result in parts]


# ---- running ----------------------------------------------------------------------------------


def _leaves(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _split(results, counts: list[int]) -> list[tuple]:
    flat, out = list(_leaves(results)), []
    for count in counts:
        out.append(tuple(flat[:count]))
        del flat[:count]
    return out


def _disagreement(got: tuple, want: tuple) -> str | None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        if g.dtype != w.dtype:
            return f"result {i}: dtype {g.dtype} != {w.dtype}"
        why = mismatch(g, w)
        if why:
            return f"result {i}: {why}"
    return None


def _run_alone(part, index: int, devices: int) -> tuple | str:
    """One case's results on XLA devices, or what the run failed with."""
    from tilefoundry.exits.runtimes.xla import run_xla

    fn, values, _ = program(f"alone{index}", [part])
    try:
        return _leaves(run_xla(fn, *values, devices=devices))
    except Exception as err:
        return f"run_xla failed: {type(err).__name__}: {str(err)[:300]}"


def run(seed: int = 0) -> Tally:
    """Every chosen case: built, simulated, lowered and run on XLA devices, compared."""
    from tilefoundry.evaluator import evaluate
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.exits.stablehlo.spmd import lower_spmd

    tally = Tally()
    ready: dict[Mesh, list] = {}
    for index, case in enumerate(choose_cases(seed, tally.skipped)):
        tally.cases += 1
        try:
            part = build(case, index, seed)
        except Skip as why:
            tally.skipped[str(why)] += 1
            continue
        fn, values, counts = program(f"case{index}", [part])
        try:
            want = _leaves(evaluate(fn, *values))
        except (VerifyError, EvalError) as err:
            tally.skipped["the simulator refuses it (see the validator's 'not executable')"] += 1
            tally.sim_refusals.append(f"{case.text}: {str(err).splitlines()[0][:200]}")
            continue
        try:
            lower_spmd(fn)
        except VerifyError as err:
            known = [phrase for phrase in REFUSED_UP_FRONT if phrase in err.message]
            if known and re.match(r"^[A-Z]\w*: ", err.message):
                tally.skipped[f"refused up front by the exit: {known[0]}"] += 1
                tally.exit_refusals.append(f"{case.text}: {err.message[:200]}")
            else:
                refusal = f"the simulator runs it, the exit refuses: {err}"
                tally.failures.append(f"{case.text}: {refusal}")
            continue
        ready.setdefault(case.mesh, []).append((case, part, want))
    for mesh, entries in ready.items():
        devices = int(np.prod(mesh.shape))
        for start in range(0, len(entries), BATCH):
            batch = entries[start : start + BATCH]
            fn, values, counts = program(f"batch{start}", [part for _, part, _ in batch])
            tally.programs += 1
            try:
                got = _split(run_xla(fn, *values, devices=devices), counts)
            except Exception:  # rerun each case alone, so the failure names its case
                got = [_run_alone(part, index, devices) for index, (_, part, _) in enumerate(batch)]
            for (case, _, want), result in zip(batch, got, strict=True):
                why = result if isinstance(result, str) else _disagreement(result, want)
                if why:
                    tally.failures.append(f"{case.text}: {why}")
                else:
                    tally.agreed += 1
                    tally.per_op[case.op] += 1
    return tally
