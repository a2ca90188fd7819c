"""FusionRegion: a group of fused ops used as a Call target, like XLA's fusion instruction
(DESIGN §4.11, SFEP-0053 §3.5).

The region is self-contained so that every engine can treat it like a small function: `inputs` are
its own parameter Vars, `body` lists the contained ops (ordinary HIR over those Vars, each keeping
its type and source span) in block order, and `outputs` are the body values that escape. The Call
of a region passes the outer values for `inputs`; its type is the output type, a TupleType for
several outputs. Keeping the ops as ordinary HIR means the evaluator, the printer and the StableHLO
exit need no per-op fusion knowledge: they evaluate, print or lower the body with inputs bound.

Construction checks only the shape of the record; whether the body is closed, fusible and leaks
nothing is the verifier's job (`tilefoundry.passes.verify`), because a pass that builds a bad
region must be reported as an internal compiler error with the IR printed, not crash here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Expr, Metadata, Var
from tilefoundry.ir.core.metadata import normalize_metadata
from tilefoundry.ir.hir.signature import type_mismatch
from tilefoundry.ir.types import CallableType, TupleType, Type
from tilefoundry.rules import register_callee_typeinfer

REGION_KINDS = ("loop", "reduction", "contraction")
"""`loop`: elementwise/view ops only; otherwise named after the region's single root."""


@dataclass(frozen=True, eq=False)
class FusionRegion(Expr):
    """`fusion(inputs) kind=... { body; yield outputs }`; its value type is a CallableType."""

    inputs: tuple[Var, ...]
    body: tuple[Expr, ...]
    outputs: tuple[Expr, ...]
    kind: str = "loop"
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)
    type: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        where = "FusionRegion"
        for name in ("inputs", "body", "outputs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for i, var in enumerate(self.inputs):
            if not isinstance(var, Var):
                raise VerifyError(f"{where}: input {i} must be a Var, got {var!r}")
        for role in ("body", "outputs"):
            for i, value in enumerate(getattr(self, role)):
                if not isinstance(value, Expr):
                    raise VerifyError(f"{where}: {role}[{i}] must be an Expr, got {value!r}")
        if not self.outputs:
            raise VerifyError(f"{where}: a region has at least one output")
        if self.kind not in REGION_KINDS:
            raise VerifyError(f"{where}: kind must be one of {REGION_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "metadata", normalize_metadata(self.metadata))
        if all(o.type is not None for o in self.outputs):
            result = output_type(tuple(o.type for o in self.outputs))
            params = tuple(v.type for v in self.inputs)
            object.__setattr__(self, "type", CallableType(params, result))


def output_type(types: tuple[Type, ...]) -> Type:
    """One output's type, or the TupleType of several (the Call's type)."""
    return types[0] if len(types) == 1 else TupleType(types)


@register_callee_typeinfer(FusionRegion)
def _call_region(region: FusionRegion, arg_types: tuple[Type, ...], ctx: TypeInferContext) -> Type:
    if len(arg_types) != len(region.inputs):
        ctx.error(
            region, f"called with {len(arg_types)} argument(s) but has {len(region.inputs)} inputs"
        )
    for i, (var, actual) in enumerate(zip(region.inputs, arg_types, strict=True)):
        if var.type != actual:
            reason = type_mismatch(var.type, actual) or f"{actual} is not exactly {var.type}"
            ctx.error(region, f"argument {i} does not match input '{var.name}': {reason}")
    return output_type(tuple(ctx.infer(o) for o in region.outputs))
