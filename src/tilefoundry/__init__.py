"""tilefoundry: a compiler for shape-typed, sharding-typed tensor programs."""

from tilefoundry.errors import EvalError, InternalCompilerError, UnsupportedError, VerifyError

__all__ = ["EvalError", "InternalCompilerError", "UnsupportedError", "VerifyError"]
