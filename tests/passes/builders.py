"""Hand-built IR for the pass tests: small typed helpers, plus the corruptions a buggy pass could
leave behind (built by bypassing construction checks, exactly as such a pass would)."""

from __future__ import annotations

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.hir import Function, FusionRegion
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.types import TensorType, f32

T8 = TensorType((8,), f32)


def typed(expr: Expr) -> Expr:
    TypeInferContext().infer(expr)
    return expr


def binary(kind: str, lhs: Expr, rhs: Expr) -> Call:
    return typed(Call(Binary(kind=BinaryKind[kind.upper()]), (lhs, rhs)))


def unary(kind: str, x: Expr) -> Call:
    return typed(Call(Unary(kind=UnaryKind[kind.upper()]), (x,)))


def function(name: str, params: tuple[Var, ...], body: Expr, return_type=None) -> Function:
    fn = Function(name, params, body, return_type or body.type)
    return fn


def region_call(build, args: tuple[Expr, ...], kind: str = "loop") -> tuple[Call, list[Expr]]:
    """A Call of a hand-built FusionRegion: `build(*input_vars) -> (body, outputs)`."""
    inputs = tuple(Var(f"in{i}", a.type) for i, a in enumerate(args))
    body, outputs = build(*inputs)
    call = typed(Call(FusionRegion(inputs, tuple(body), tuple(outputs), kind), args))
    return call, body
