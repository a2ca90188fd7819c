"""How the engines' diagnostics name an op's operands and its iteration-domain dims.

Shard propagation and the block plan work on argument positions and domain dims, but the user
wrote `matmul(x, w)` and reads the op's documentation: a refusal says `operand 'rhs'` (the op's
ParamDef name) and names a domain dim by the operand axes that read it, `lhs axis 1 = rhs axis 0`.
Where the op's names are not known (the engine called on bare types, or an argument list that
is not the op's schema), the message keeps positions: `input 1`, `domain dim 0`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.analysis.access_relation import AccessRelations
from tilefoundry.analysis.access_structure import Projection
from tilefoundry.sharding.axis_access import axis_accesses


def schema_names(op: object, count: int) -> tuple[str, ...] | None:
    """The op's input names when its arguments are its schema's inputs (`count` of them)."""
    names = type(op).inputs()
    return tuple(names) if len(names) == count else None


@dataclass(frozen=True)
class OperandNames:
    """`names`: one per argument, or None; `position`: the word for an unnamed argument."""

    names: tuple[str, ...] | None
    relations: AccessRelations | None = None
    position: str = "input"

    def operand(self, index: int) -> str:
        if self.names is None:
            return f"{self.position} {index}"
        return f"operand '{self.names[index]}'"

    def operands(self, first: int, second: int) -> str:
        if self.names is None:
            return f"{self.position}s {first} and {second}"
        return f"operands '{self.names[first]}' and '{self.names[second]}'"

    def value(self, index: int) -> str:
        """The name a remedy writes, as in `reshard(rhs, Broadcast)`."""
        return "x" if self.names is None else self.names[index]

    def dim(self, dim: int) -> str:
        """`lhs axis 1 = rhs axis 0`: the operand axes that read the domain dim as a plain
        projection; `domain dim 1` when none does or the operands have no names."""
        if self.names is None or self.relations is None:
            return f"domain dim {dim}"
        readers = [
            f"{name} axis {axis}"
            for name, boundary in zip(self.names, self.relations.inputs, strict=True)
            for axis, access in enumerate(axis_accesses(boundary.pattern))
            if isinstance(access, Projection) and access.dim == dim
        ]
        return " = ".join(readers) if readers else f"domain dim {dim}"
