"""tilefoundry: a compiler for shape-typed, sharding-typed tensor programs."""

from tilefoundry.autodiff import grad, value_and_grad, vjp
from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError, VerifyError
from tilefoundry.frontend import ConstTensor, Tensor, func, module, tile
from tilefoundry.ir.core import DimVarRangePat
from tilefoundry.ir.types import DimVar

__all__ = [
    "ConstTensor",
    "DimVar",
    "DimVarRangePat",
    "EvalError",
    "InternalCompilerError",
    "Tensor",
    "UnsupportedError",
    "VerifyError",
    "func",
    "grad",
    "module",
    "tile",
    "value_and_grad",
    "vjp",
]
