"""tilefoundry: a compiler for shape-typed, sharding-typed tensor programs.

The public names below are imported on first use (PEP 562 `__getattr__`), so that importing a
submodule loads only what it needs: the `tilefoundry` command's entry (`tilefoundry.cli`) installs
its Ctrl-C handler before the compiler (numpy, the op catalog) is imported, and a Ctrl-C
during that import ends the command like any other (exit 130, one line), not with a traceback.
Only islpy is imported eagerly (see below): a Ctrl-C within its import, a few tenths of a second
before the handler exists, is still Python's own KeyboardInterrupt.
"""

from __future__ import annotations

import importlib
from typing import Any

# islpy first, from the package's top: its import compiles deeply nested regular expressions
# (importlib.metadata -> email -> locale), and reached through the op modules' import chain it
# would start ~100 frames down, which a program run under a low recursion limit cannot afford
# (tests/cli/test_deep_calls.py runs every command under a limit of 200).
import islpy  # noqa: F401

from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError, VerifyError

_LAZY = {
    "ConstTensor": "tilefoundry.frontend",
    "DimVar": "tilefoundry.ir.types",
    "DimVarRangePat": "tilefoundry.ir.core",
    "Tensor": "tilefoundry.frontend",
    "checkpoint": "tilefoundry.autodiff",
    "func": "tilefoundry.frontend",
    "grad": "tilefoundry.autodiff",
    "jit": "tilefoundry.exits.runtimes.device_step",
    "module": "tilefoundry.frontend",
    "tile": "tilefoundry.frontend",
    "value_and_grad": "tilefoundry.autodiff",
    "vjp": "tilefoundry.autodiff",
}

__all__ = [
    "ConstTensor",
    "DimVar",
    "DimVarRangePat",
    "EvalError",
    "InternalCompilerError",
    "Tensor",
    "UnsupportedError",
    "VerifyError",
    "checkpoint",
    "func",
    "grad",
    "jit",
    "module",
    "tile",
    "value_and_grad",
    "vjp",
]


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'tilefoundry' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
