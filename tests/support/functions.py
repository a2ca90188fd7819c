"""Building typed hir Functions by hand for evaluator tests (until the DSL front end is used)."""

from __future__ import annotations

from collections.abc import Callable

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.hir import Function


def function_of(params: dict, build: Callable[..., Expr], name: str = "f") -> Function:
    """`Function(name, params, build(*param_vars))` with its return type inferred from the body."""
    variables = tuple(Var(n, t) for n, t in params.items())
    body = build(*variables)
    return Function(name, variables, body, TypeInferContext().infer(body))


def call(op, *args: Expr) -> Call:
    return Call(op, tuple(args))
