"""Dispatch patterns: the specialization keys a shape-dispatched Function's variants carry."""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.errors import VerifyError


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class DimVarRangePat:
    """`lo <= dim_var < hi`: half-open, so adjacent variants meet at `[.., c)` then `[c, ..)`.

    The DimVar is named, not held: the pattern anchors to whichever DimVar of that name the owning
    function's parameters declare, and the function verifier checks the envelope containment.
    """

    dim_var: str
    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not isinstance(self.dim_var, str) or not self.dim_var:
            raise VerifyError(
                f"DimVarRangePat: dim_var must be a DimVar name, got {self.dim_var!r}"
            )
        for label, bound in (("lo", self.lo), ("hi", self.hi)):
            if not _is_int(bound):
                raise VerifyError(
                    f"DimVarRangePat {self.dim_var}: {label} must be an int, got {bound!r}"
                )
        if not self.lo < self.hi:
            raise VerifyError(
                f"DimVarRangePat {self.dim_var}: empty range [{self.lo}, {self.hi}) (need lo < hi)"
            )

    def match(self, value: int) -> bool:
        return self.lo <= value < self.hi

    @property
    def canonical(self) -> str:
        """This pattern's part of a variant's canonical signature (hir §1.1)."""
        return f"{self.dim_var}${self.lo}_{self.hi}"

    def __str__(self) -> str:
        return f"{self.dim_var} in [{self.lo}, {self.hi})"
