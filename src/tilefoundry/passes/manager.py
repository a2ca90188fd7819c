"""The pass manager: named passes, each verified before and after (SFEP-0053 §3.4).

Every pass's output is verified before the next pass (or an exit) sees it, so no pass output
reaches an exit unverified. Verification is incremental: nodes a pass kept from its already
verified input (same object, same tier) are not re-checked, and a new node whose signature (op,
operand types and literals, stamped type: all its per-node checks read) already passed at the
tier in this run is not re-checked either; everything else is, plus the whole-body checks.
TILEFOUNDRY_DEBUG_PASSES=1 (or `debug=True`) turns that off and re-checks every node after every
pass.

The IR a pass receives is verified first, so a failure there is the user's program (a plain
VerifyError); the IR a pass returns is verified at the pass's output tier, so a failure there is
the pass's fault and becomes an InternalCompilerError that carries the printed IR with the bad
node marked. `debug=True` or the environment variable TILEFOUNDRY_DEBUG_PASSES=1 also prints the IR
around every failure (user-level ones included) to stderr as it happens.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tilefoundry.analysis import describe
from tilefoundry.errors import InternalCompilerError, VerifyError
from tilefoundry.gc_pause import gc_paused
from tilefoundry.ir.core import Expr, Module, source_span
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.text import format_ir
from tilefoundry.ir.types import TensorType, TupleType, tensor_fields
from tilefoundry.passes.fuse import FusionReport, fuse_with_report
from tilefoundry.passes.legalize import legalize
from tilefoundry.passes.verify import verify

DEBUG_ENV = "TILEFOUNDRY_DEBUG_PASSES"


@dataclass(frozen=True)
class Pass:
    """A transforming pass: `run(ir) -> ir`, and the tier its output must verify at."""

    name: str
    run: Callable[[Any], Any]
    output_tier: str


def ir_around(ir: Any, node: Any) -> str:
    """The printed IR, with `>>` marking the lines of the node's source location when known."""
    text = format_ir(ir, locations=True)
    span = source_span(node) if isinstance(node, Expr) else None
    if span is None:
        return text
    mark = f"loc({span.file}:{span.line}:{span.col})"
    return "\n".join((">> " if mark in ln else "   ") + ln for ln in text.splitlines()) + "\n"


class PassManager:
    def __init__(self, passes: Sequence[Pass], *, input_tier: str = "hir", debug: bool = False):
        self.passes = tuple(passes)
        self.input_tier = input_tier
        self.debug = debug or os.environ.get(DEBUG_ENV, "") not in ("", "0")
        self.verified: dict[str, set[Expr]] = {}
        """tier -> nodes (and node signatures) already verified at it in this run (unused in
        debug mode)."""

    def run(self, ir: Any) -> Any:
        self._verify(ir, self.input_tier, "the input")
        for step in self.passes:
            try:
                out = step.run(ir)
            except VerifyError as err:
                self._report(ir, err, f"pass '{step.name}' failed")
                raise
            try:
                self._verify(out, step.output_tier, f"the output of pass '{step.name}'")
            except VerifyError as err:
                raise InternalCompilerError(
                    f"pass '{step.name}' broke the IR: {err}\n"
                    f"--- IR after {step.name} ---\n{ir_around(out, getattr(err, 'node', None))}"
                ) from err
            ir = out
        return ir

    def _verify(self, ir: Any, tier: str, what: str) -> None:
        try:
            trusted = None if self.debug else self.verified.setdefault(tier, set())
            verify(ir, tier=tier, trusted=trusted)
        except VerifyError as err:
            self._report(ir, err, f"verify ({tier}) rejected {what}")
            raise

    def _report(self, ir: Any, err: VerifyError, headline: str) -> None:
        if self.debug:
            around = ir_around(ir, getattr(err, "node", None))
            print(f"{headline}: {err}\n{around}", file=sys.stderr)


def require_static_signatures(ir: Any) -> None:
    """The tensor tier has static, positive dimensions only (SFEP-0053 §3.2). A dynamic
    signature or a zero-size value is the user's choice, not a pass's breakage, so it is refused
    up front as a VerifyError (located at the value) rather than as the verifier's complaint
    about legalize's output."""
    functions = ir.functions if isinstance(ir, Module) else (ir,)
    for fn in functions:
        signature = [(f"parameter '{p.name}'", p.type) for p in fn.params]
        for what, type_ in [*signature, ("the return type", fn.return_type)]:
            for tensor in tensor_fields(type_):
                dynamic = [d for d in tensor.shape if not isinstance(d, int)]
                if dynamic:
                    raise VerifyError(
                        f"compile: Function {fn.name}: {what} has the dynamic dimension "
                        f"{dynamic[0]}; the tensor tier needs static shapes, so compile a "
                        "function with concrete extents (the StableHLO exit and the evaluator "
                        "take dynamic functions directly and bind them per call)",
                        location=source_span(fn),
                    )
        _refuse_zero_sizes(fn)


def _refuse_zero_sizes(fn: Any) -> None:
    values = [(f"parameter '{p.name}'", p.type, p) for p in fn.params]
    values.append(("the return type", fn.return_type, fn))
    if isinstance(fn.body, Expr):  # described only when refused: a name per node costs
        params = set(fn.params)
        values += [(None, n.type, n) for n in iter_nodes(fn.body) if n not in params]
    for what, type_, node in values:
        if not isinstance(type_, TensorType | TupleType):
            continue
        for tensor in tensor_fields(type_):
            if any(isinstance(d, int) and d <= 0 for d in tensor.shape):
                what = describe(node) if what is None else what
                raise VerifyError(
                    f"compile: Function {fn.name}: {what} has the zero-size type {tensor}; the "
                    "tensor tier (legalize, fusion) needs extents >= 1, so drop the "
                    "empty value or give it a positive extent",
                    location=source_span(node) or source_span(fn),
                )


@gc_paused
def compile(fn: Any, *, debug: bool = False) -> tuple[Any, FusionReport]:
    """legalize -> verify -> fuse -> verify; the fused Function/Module and its fusion report."""
    require_static_signatures(fn)
    reports: list[FusionReport] = []

    def fuse_step(ir: Any) -> Any:
        fused, report = fuse_with_report(ir)
        reports.append(report)
        return fused

    manager = PassManager(
        (Pass("legalize", legalize, "tensor"), Pass("fuse", fuse_step, "tensor")), debug=debug
    )
    return manager.run(fn), reports[-1]
