"""HIR math ops (hir §1.3 ir/hir/math)."""

from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.clamp import Clamp
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind

__all__ = [
    "Binary",
    "BinaryKind",
    "Clamp",
    "Unary",
    "UnaryKind",
]
