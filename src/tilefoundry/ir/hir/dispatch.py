"""Shape dispatch: the envelope-partition rules on variants and variant selection.

A dispatch base's variants must partition the envelope of the DimVar they dispatch on (hir §1.1
Envelope coverage) so that every in-envelope shape selects exactly one implementation. Overlap and
duplicates are refused as each variant is registered; gaps can only be judged once authoring ends
(the Module seals the base), because a half-registered base is legitimately incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import DimVarRangePat
from tilefoundry.ir.hir.signature import signature_dim_vars
from tilefoundry.ir.types import DimVar, TensorType

if TYPE_CHECKING:
    from tilefoundry.ir.hir.function import Function


def canonical_signature(specializations: Sequence[DimVarRangePat]) -> str:
    """hir §1.1: `";".join(f"{p.dim_var}${p.lo}_{p.hi}")`, the identity of a variant."""
    return ";".join(p.canonical for p in specializations)


def input_dim_vars(fn: Function) -> dict[str, DimVar]:
    found = signature_dim_vars((f"parameter '{p.name}'", p.type) for p in fn.params)
    return {name: var for name, (var, _) in found.items()}


def check_anchor(fn: Function) -> None:
    """A variant's pattern names a DimVar reachable from an input parameter, inside its envelope."""
    (pattern,) = fn.specializations
    declared = input_dim_vars(fn)
    var = declared.get(pattern.dim_var)
    if var is None:
        known = ", ".join(sorted(declared)) or "none"
        raise VerifyError(
            f"Function {fn.name}: pattern {pattern} names unknown DimVar {pattern.dim_var}; "
            f"the input parameters declare: {known}"
        )
    if pattern.lo < var.lo or pattern.hi > var.hi:
        raise VerifyError(
            f"Function {fn.name}: pattern {pattern} lies outside the envelope "
            f"[{var.lo}, {var.hi}) of DimVar {var.name}"
        )


def _signature_of(fn: Function) -> tuple:
    return tuple((p.name, p.type) for p in fn.params), fn.return_type


def check_new_variant(base: Function, variant: Function, existing: Sequence[Function]) -> None:
    """Shape, shared signature, one DimVar, distinct signature and no overlap (hir §1.1)."""
    from tilefoundry.ir.hir.function import Function

    where = f"Function {base.name}"
    if not isinstance(variant, Function):
        raise VerifyError(f"{where}: a variant must be a Function, got {variant!r}")
    if not variant.specializations:
        raise VerifyError(f"{where}: a variant must carry one DimVarRangePat specialization")
    if variant.variants:
        raise VerifyError(f"{where}: a variant must not carry variants (nesting is one level)")
    if variant.name != base.name or _signature_of(variant) != _signature_of(base):
        raise VerifyError(
            f"{where}: variant {variant.specializations[0]} must share the base's name, parameters "
            f"and return type (a variant specializes the body, not the signature)"
        )
    (pattern,) = variant.specializations
    signature = canonical_signature(variant.specializations)
    for other in existing:
        (theirs,) = other.specializations
        if theirs.dim_var != pattern.dim_var:
            raise VerifyError(
                f"{where}: variants dispatch on different DimVars ({theirs.dim_var} and "
                f"{pattern.dim_var}); one base dispatches on one DimVar"
            )
        if canonical_signature(other.specializations) == signature:
            raise VerifyError(f"{where}: duplicate canonical signature {signature!r}")
        lo, hi = max(pattern.lo, theirs.lo), min(pattern.hi, theirs.hi)
        if lo < hi:
            raise VerifyError(
                f"{where}: variant {pattern} overlaps variant {theirs} on [{lo}, {hi}); "
                "variants must partition the envelope"
            )


def check_coverage(base: Function) -> None:
    """The variants' ranges are jointly complete over the envelope: no gap, no short cover."""
    patterns = sorted((v.specializations[0] for v in base.variants), key=lambda p: p.lo)
    var = input_dim_vars(base)[patterns[0].dim_var]
    where = f"Function {base.name}: variants of DimVar {var.name} [{var.lo}, {var.hi})"
    if patterns[0].lo > var.lo:
        raise VerifyError(
            f"{where} fall short of the envelope: [{var.lo}, {patterns[0].lo}) is not covered"
        )
    if patterns[-1].hi < var.hi:
        raise VerifyError(
            f"{where} fall short of the envelope: [{patterns[-1].hi}, {var.hi}) is not covered"
        )
    for left, right in pairwise(patterns):
        if left.hi < right.lo:
            raise VerifyError(
                f"{where} leave a gap [{left.hi}, {right.lo}) between {left} and {right}"
            )


def select_variant(
    base: Function,
    arg_shapes: Sequence[Sequence[int]] | None = None,
    *,
    bindings: Mapping[str, int] | None = None,
) -> Function:
    """The variant whose range holds the dispatch DimVar's value (read from the concrete argument
    shapes, or given in `bindings`); EvalError when it is unbound or outside the envelope."""
    if not base.variants:
        raise EvalError(f"Function {base.name}: not a dispatch base (it has no variants)")
    name = base.variants[0].specializations[0].dim_var
    var = input_dim_vars(base)[name]
    value = _dispatch_value(base, var, arg_shapes, bindings)
    if not var.lo <= value < var.hi:
        raise EvalError(
            f"Function {base.name}: {name}={value} lies outside the dispatch envelope "
            f"[{var.lo}, {var.hi}); no variant matches"
        )
    for variant in base.variants:
        if variant.specializations[0].match(value):
            return variant
    raise EvalError(f"Function {base.name}: no variant matches {name}={value}")


def _dispatch_value(
    base: Function,
    var: DimVar,
    arg_shapes: Sequence[Sequence[int]] | None,
    bindings: Mapping[str, int] | None,
) -> int:
    if bindings is not None:
        if var.name not in bindings:
            raise EvalError(f"Function {base.name}: DimVar {var.name} is unbound")
        return bindings[var.name]
    if arg_shapes is None or len(arg_shapes) != len(base.params):
        count = "no" if arg_shapes is None else len(arg_shapes)
        raise EvalError(
            f"Function {base.name}: expected {len(base.params)} argument shapes, got {count}"
        )
    seen: dict[int, str] = {}
    for param, shape in zip(base.params, arg_shapes, strict=True):
        if not isinstance(param.type, TensorType):
            continue
        if len(shape) != len(param.type.shape):
            raise EvalError(
                f"Function {base.name}: parameter '{param.name}' has rank "
                f"{len(param.type.shape)}, argument shape {tuple(shape)}"
            )
        for axis, dim in enumerate(param.type.shape):
            if dim is var:
                seen.setdefault(int(shape[axis]), f"'{param.name}' axis {axis}")
    if len(seen) != 1:
        detail = ", ".join(f"{v} at {w}" for v, w in seen.items()) or "no argument axis"
        raise EvalError(f"Function {base.name}: DimVar {var.name} is not bound uniquely ({detail})")
    return next(iter(seen))
