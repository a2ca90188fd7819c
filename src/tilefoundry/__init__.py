"""tilefoundry: a compiler for shape-typed, sharding-typed tensor programs."""

# islpy first, from the package's top: its import compiles deeply nested regular expressions
# (importlib.metadata -> email -> locale), and reached through the op modules' import chain it
# would start ~100 frames down, which a program run under a low recursion limit cannot afford
# (tests/cli/test_deep_calls.py runs every command under a limit of 200).
import islpy  # noqa: F401

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
