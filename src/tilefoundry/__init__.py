"""tilefoundry: a compiler for shape-typed, sharding-typed tensor programs."""

from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError, VerifyError
from tilefoundry.ir.core import DimVarRangePat
from tilefoundry.ir.types import DimVar

__all__ = [
    "DimVar",
    "DimVarRangePat",
    "EvalError",
    "InternalCompilerError",
    "UnsupportedError",
    "VerifyError",
]
