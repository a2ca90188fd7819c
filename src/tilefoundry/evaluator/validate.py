"""The sharding-rule validator: every typeinfer Partial/Split rule checked against execution.

`python -m tilefoundry.evaluator.validate [--op NAME] [--samples N] [--seed S] [--full] [--vjp]`

For each HIR op, each sample its module registers (VALIDATION_SAMPLES), and each combination of
per-mesh-axis input states (Broadcast, Split on each logical axis, Partial sum|max|min), typeinfer
says whether it accepts the combination and which output type it claims. The validator then places
adversarial inputs on the simulated devices (`validation_inputs`), runs the op through the
evaluator's mesh path, completes the claimed output state (gathers Splits, reduces Partials with the
claimed reduction, checks that Broadcast replicas agree) and compares with the unsharded run, twice
(values and their sign flip). It reports, after DTensor's `strategy_validation`:

- unsound acceptances: typeinfer accepts, execution refutes. Must be none; exit status 1 if any.
- missed opportunities: typeinfer rejects, yet some output state reproduces the unsharded result
  (1-axis meshes only; for information).
- accepted but not executable by the simulator: the evaluator refuses the accepted combination, so
  it is neither confirmed nor refuted; listed so such gaps stay visible.

`--vjp` checks the VJP rules instead, over the ops that have one (`validation_vjp`): the backward
of each accepted one-op program on simulated devices against the unsharded backward; an unsound
or an untyped backward (the forward types, its backward does not) exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tilefoundry.evaluator.validation_checks import Report, SampleRun, Settings, Tally
from tilefoundry.evaluator.validation_vjp import VjpSampleRun
from tilefoundry.ir.core import Op
from tilefoundry.rules import TYPEINFER, VALIDATION_SAMPLES, VJP, ZERO_COTANGENT
from tilefoundry.rules.validation_samples import Sample

_UNREGISTERED = "not sampled: missing (the op registers no validation samples)"


def catalog_samples(op: str | None = None) -> tuple[dict[str, list[Sample]], dict[str, str]]:
    """The HIR ops registered for typeinfer (`tilefoundry.ir.hir.*`): their samples, and the ops
    without any, each with its reason. The catalog comes from typeinfer rather than from the
    sample registry, so an op that forgot to register samples is reported, not silently skipped."""
    return _catalog(op, vjp=False)


def vjp_catalog_samples(op: str | None = None) -> tuple[dict[str, list[Sample]], dict[str, str]]:
    """`catalog_samples` for the VJP mode: an op without a VJP rule is listed as not sampled,
    with why (a zero cotangent, or refused by the transform)."""
    return _catalog(op, vjp=True)


def _catalog(op: str | None, *, vjp: bool) -> tuple[dict[str, list[Sample]], dict[str, str]]:
    classes = sorted(
        (
            cls
            for cls in TYPEINFER.registered()
            if issubclass(cls, Op) and cls.__module__.startswith("tilefoundry.ir.hir.")
        ),
        key=lambda cls: cls.__name__,
    )
    if op is not None:
        names = [cls.__name__ for cls in classes]
        if op not in names:
            raise SystemExit(f"validate: no HIR op named {op!r}; ops: {', '.join(names)}")
        classes = [classes[names.index(op)]]
    sampled: dict[str, list[Sample]] = {}
    not_sampled: dict[str, str] = {}
    for cls in classes:
        entry = VALIDATION_SAMPLES.lookup(cls)() if VALIDATION_SAMPLES.has(cls) else _UNREGISTERED
        if vjp and not VJP.has(cls):
            entry = _without_a_rule(cls)
        if isinstance(entry, str):
            not_sampled[cls.__name__] = entry
        else:
            sampled[cls.__name__] = list(entry)
    return sampled, not_sampled


def _without_a_rule(cls: type) -> str:
    if ZERO_COTANGENT.has(cls):
        return f"no VJP rule: a zero cotangent ({ZERO_COTANGENT.lookup(cls)()})"
    return "no VJP rule: the transform refuses it (tests/autodiff/test_vjp_coverage.py)"


def validate(
    samples_by_op: Mapping[str, Sequence[Sample]],
    settings: Settings | None = None,
    *,
    not_sampled: Mapping[str, str] | None = None,
    progress: bool = False,
) -> Report:
    """Check every sample of every op in `samples_by_op` on every mesh of `settings`."""
    settings = settings or Settings()
    report = Report(not_sampled=dict(not_sampled or {}))
    work = []
    for name, samples in samples_by_op.items():
        chosen = [s for s in samples if s.ci or settings.full][: settings.samples]
        report.tallies.setdefault(name, Tally()).samples = len(chosen)
        for index, sample in enumerate(chosen):
            label = sample.label or f"sample {index}"
            work += [(name, label, sample, mesh) for mesh in settings.meshes]
    with Progress(console=Console(stderr=True), disable=not progress, transient=True) as bar:
        task = bar.add_task("validating", total=len(work))
        for name, label, sample, mesh in work:
            bar.update(task, description=f"{name} {label}")
            runner = VjpSampleRun if settings.vjp else SampleRun
            runner(name, label, sample, mesh, settings, report).run()
            bar.advance(task)
    return report


_COLUMNS = (
    "samples",
    "combinations",
    "accepted",
    "rejected",
    "unsound",
    "missed",
    "not_executable",
)
_VJP_COLUMNS = (
    "samples",
    "combinations",
    "accepted",
    "rejected",
    "no_cotangent",
    "untyped",
    "unsound",
    "not_executable",
)


def render(report: Report, console: Console, *, listed: int = 40, vjp: bool = False) -> None:
    """The per-op summary table, then every unsound acceptance, then the information lists."""
    columns = _VJP_COLUMNS if vjp else _COLUMNS
    table = Table(title="VJP-rule validation" if vjp else "sharding-rule validation")
    table.add_column("op")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    total = Tally()
    for name, tally in sorted(report.tallies.items()):
        table.add_row(name, *(str(getattr(tally, c)) for c in columns))
        for column in columns:
            setattr(total, column, getattr(total, column) + getattr(tally, column))
    table.add_row("total", *(str(getattr(total, c)) for c in columns), style="bold")
    console.print(table)
    for name, reason in sorted(report.not_sampled.items()):
        console.print(f"not sampled: {name}: {reason}")
    sections = (
        ("UNSOUND acceptances (typeinfer accepts, execution refutes)", report.unsound, None),
        ("UNTYPED backwards (the forward types, its backward does not)", report.untyped, None),
        ("broken samples (the unsharded call itself fails)", report.broken_samples, None),
        ("accepted but not executable by the simulator", report.not_executable, listed),
        (
            "missed opportunities (typeinfer rejects, these output states agree)",
            report.missed,
            listed,
        ),
    )
    for title, findings, limit in sections:
        if not findings:
            continue
        console.print(f"\n[bold]{title}: {len(findings)}[/bold]")
        for f in findings[:limit]:
            console.print(
                f"  {f.op} [{f.sample}] mesh {f.mesh}: inputs ({f.inputs}) -> "
                f"{f.claimed}: {f.detail}",
                markup=False,
                highlight=False,
            )
        if limit is not None and len(findings) > limit:
            console.print(f"  ... {len(findings) - limit} more (narrow with --op)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tilefoundry.evaluator.validate",
        description="Check every HIR op's sharding rules against simulated execution.",
    )
    parser.add_argument("--op", help="validate one op class (e.g. Binary)")
    parser.add_argument("--samples", type=int, help="at most N samples per op")
    parser.add_argument("--seed", type=int, default=0, help="input seed (default 0)")
    parser.add_argument(
        "--full", action="store_true", help="all samples, the extent-2 mesh too, more combinations"
    )
    parser.add_argument(
        "--vjp", action="store_true", help="check the VJP rules (the backward of each op sample)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    samples, not_sampled = (vjp_catalog_samples if args.vjp else catalog_samples)(args.op)
    settings = Settings(seed=args.seed, full=args.full, samples=args.samples, vjp=args.vjp)
    report = validate(samples, settings, not_sampled=not_sampled, progress=not args.no_progress)
    render(report, Console(width=None if sys.stdout.isatty() else 132), vjp=args.vjp)
    return 1 if report.unsound or report.untyped else 0


if __name__ == "__main__":
    sys.exit(main())
