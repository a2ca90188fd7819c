"""HIR math ops (hir §1.3 ir/hir/math). Unary and Binary, with many kinds, are two modules each:
the op and its typing rules (`unary`, `binary`) and its execution forms on every exit
(`unary_kernels`, `binary_kernels`), imported here so that importing the op registers all of its
rules."""

from tilefoundry.ir.hir.math import binary_kernels, unary_kernels
from tilefoundry.ir.hir.math.binary import Binary, BinaryKind
from tilefoundry.ir.hir.math.clamp import Clamp
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind

__all__ = [
    "Binary",
    "BinaryKind",
    "Clamp",
    "Unary",
    "UnaryKind",
    "binary_kernels",
    "unary_kernels",
]

# The VJP rules of both ops (registered on import).
from tilefoundry.ir.hir.math import derivatives  # noqa: F401
