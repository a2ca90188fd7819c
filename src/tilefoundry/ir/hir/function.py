"""hir §1.1 Function: the HIR function container in its three shapes.

normal (body, no variants), dispatch prototype (no body, variants) and variant (body, one
DimVarRangePat). Construction enforces every shape and signature rule at once so no later stage
meets a malformed function. Variants accumulate on a prototype only until it enters a Module,
which seals it; from then on the variant set — part of equality and hashing — is final.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import DimVarRangePat, Expr, Metadata, Var
from tilefoundry.ir.core.metadata import normalize_metadata
from tilefoundry.ir.hir.dispatch import check_anchor, check_coverage, check_new_variant
from tilefoundry.ir.hir.signature import signature_dim_vars
from tilefoundry.ir.names import check_name
from tilefoundry.ir.types import CallableType, TensorType, TupleType


@dataclass(frozen=True, eq=False)
class Function(Expr):
    """A function; its value type is the CallableType of its signature.

    Equality and hashing are structural over (name, params, body, return_type, specializations,
    variants); params and body compare by identity as every Expr does. `label` is the author's
    display name for a variant and is deliberately excluded: nothing may select by it.
    """

    name: str
    params: tuple[Var, ...]
    body: Expr | None
    return_type: Any
    specializations: tuple[DimVarRangePat, ...] = ()
    variants: tuple[Function, ...] = ()
    label: str | None = None
    metadata: tuple[Metadata, ...] = field(default=(), repr=False)
    type: CallableType = field(init=False, repr=False)
    _sealed: bool = field(init=False, repr=False, default=False)
    facts: dict[str, Any] = field(init=False, repr=False, default_factory=dict)
    """What `ir.hir.facts` has read off this function, each fact computed once (a Function does
    not change once built), and dropped with it."""

    def __post_init__(self) -> None:
        where = f"Function {self.name}"
        check_name("Function", self.name)
        params = tuple(self.params)
        for i, param in enumerate(params):
            if not isinstance(param, Var):
                raise VerifyError(f"{where}: parameter {i} must be a Var, got {param!r}")
        if self.body is not None and not isinstance(self.body, Expr):
            raise VerifyError(f"{where}: body must be a single Expr (or None), got {self.body!r}")
        if not isinstance(self.return_type, TensorType | TupleType):
            raise VerifyError(
                f"{where}: return_type must be a TensorType or TupleType, got {self.return_type!r}"
            )
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "specializations", tuple(self.specializations))
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "metadata", normalize_metadata(self.metadata))
        self._check_shape(where)
        signature_dim_vars(
            [(f"parameter '{p.name}'", p.type) for p in params]
            + [("the return type", self.return_type)]
        )
        if self.specializations:
            check_anchor(self)
        object.__setattr__(
            self, "type", CallableType(tuple(p.type for p in params), self.return_type)
        )
        if self.variants:
            for i, variant in enumerate(self.variants):
                check_new_variant(self, variant, self.variants[:i])
            self.seal()

    def _check_shape(self, where: str) -> None:
        for pattern in self.specializations:
            if not isinstance(pattern, DimVarRangePat):
                raise VerifyError(f"{where}: specializations hold DimVarRangePat, got {pattern!r}")
        if self.specializations:
            if len(self.specializations) != 1:
                raise VerifyError(
                    f"{where}: a variant carries exactly one DimVarRangePat, "
                    f"got {len(self.specializations)}"
                )
            if self.variants:
                raise VerifyError(f"{where}: a variant must not carry variants")
            if self.body is None:
                raise VerifyError(f"{where}: a variant needs a body")
        if self.variants and self.body is not None:
            raise VerifyError(
                f"{where}: a function with variants is a dispatch prototype and has no body"
            )

    @property
    def is_dispatch_base(self) -> bool:
        return self.body is None

    @property
    def sealed(self) -> bool:
        return self._sealed

    def add_variant(self, variant: Function) -> Function:
        """Register a variant on this prototype during authoring; refused once sealed."""
        where = f"Function {self.name}"
        if self._sealed:
            raise VerifyError(f"{where}: sealed (it belongs to a Module); no more variants")
        if self.body is not None:
            raise VerifyError(f"{where}: has a body; only a dispatch prototype takes variants")
        check_new_variant(self, variant, self.variants)
        object.__setattr__(self, "variants", (*self.variants, variant))
        return variant

    def specialize(
        self, pattern: DimVarRangePat, body: Expr, *, label: str | None = None
    ) -> Function:
        """Build the variant `pattern -> body` over this base's own parameters and register it."""
        variant = Function(
            self.name,
            self.params,
            body,
            self.return_type,
            specializations=(pattern,),
            label=label,
        )
        return self.add_variant(variant)

    def seal(self) -> None:
        """End authoring: a base must now be callable and its variants cover the envelope."""
        if self._sealed:
            return
        if self.body is None and not self.variants:
            raise VerifyError(
                f"Function {self.name}: has no body and no variants, so it cannot be called"
            )
        if self.variants:
            check_coverage(self)
        for variant in self.variants:
            variant.seal()
        object.__setattr__(self, "_sealed", True)

    def _key(self) -> tuple:
        return (
            self.name,
            self.params,
            self.body,
            self.return_type,
            self.specializations,
            self.variants,
        )

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Function and self._key() == other._key())

    def __hash__(self) -> int:
        if self.body is None and not self._sealed:
            raise VerifyError(
                f"Function {self.name}: a dispatch base cannot be hashed while it still "
                "accumulates variants; put it in a Module first"
            )
        return hash(self._key())
