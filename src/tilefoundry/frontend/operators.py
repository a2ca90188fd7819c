"""The operator tables of the DSL: Python syntax → surface op names, and compile-time Python.

An operator on a tensor resolves through the surface registry (`+` is `tf.add`, hir §1.3 math),
so these tables name surface entries, never op classes; an operator on compile-time values is
ordinary Python, evaluated while the function is parsed.
"""

from __future__ import annotations

import ast
import operator

BINARY_SURFACE = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floor_div",
    ast.Mod: "mod",
    ast.BitAnd: "logical_and",
    ast.BitOr: "logical_or",
    ast.MatMult: "matmul",
}
COMPARE_SURFACE = {
    ast.Lt: "cmp_lt",
    ast.LtE: "cmp_le",
    ast.Gt: "cmp_gt",
    ast.GtE: "cmp_ge",
    ast.Eq: "cmp_eq",
    ast.NotEq: "cmp_ne",
}
PYTHON_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.MatMult: operator.matmul,
}
PYTHON_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
PYTHON_UNARY = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
STATIC_BUILTINS = frozenset(
    {len, min, max, abs, int, float, bool, tuple, list, round, sum, slice, str}
)
STATIC_MODULES = ("tilefoundry.ir.types", "numpy", "ml_dtypes", "math")
UNSUPPORTED_EXPRESSIONS = {
    ast.Lambda: ("lambda is not supported in a function body", "define a @func instead"),
    ast.ListComp: ("comprehensions are not supported", "write the values out or use an op"),
    ast.SetComp: ("comprehensions are not supported", "write the values out or use an op"),
    ast.DictComp: ("comprehensions are not supported", "write the values out or use an op"),
    ast.GeneratorExp: ("generator expressions are not supported", "write the values out"),
    ast.Dict: ("dict literals are not supported", "pass attributes as keywords"),
    ast.JoinedStr: ("f-strings are not supported", "use a plain string constant"),
    ast.NamedExpr: ("the walrus operator := is not supported", "assign in a statement"),
    ast.Starred: ("starred expressions are not supported", "pass arguments one by one"),
    ast.Await: ("await is not supported", "HIR functions are not coroutines"),
    ast.Yield: ("yield is not supported", "return the value instead"),
    ast.YieldFrom: ("yield is not supported", "return the value instead"),
}
