"""From a decorated Python function to a typed hir Function (hir §1.1, parser §1.1, §5).

The annotations were already evaluated by Python when the `def` ran (DESIGN §3); the source is
read (`inspect.getsource`, dedented) only for the body and for the span of every node. One parse
is one elaboration session, and every node is typed as it is built, so a program that is wrong
fails at the `def`, at its own line.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.frontend.annotations import TensorSpec
from tilefoundry.frontend.def_lines import def_source_lines
from tilefoundry.frontend.depth import with_python_compiler_room
from tilefoundry.frontend.errors import Diagnostics, SourceMap, internal_boundary
from tilefoundry.frontend.scopes import Environment
from tilefoundry.frontend.statements import BodyBuilder
from tilefoundry.ir.core import Expr, Metadata, SourceSpan, Var
from tilefoundry.ir.hir import ElaborationSession
from tilefoundry.ir.types import TensorType, TupleType
from tilefoundry.ir.types.shard import Partial


@dataclass(frozen=True)
class ConstParam(Metadata):
    """A parameter annotated `ConstTensor[...]` (parser §1.4): its value is a compile-time
    constant of the caller. Core `Var` has no `is_const` field, so the fact rides as metadata."""


@dataclass
class ParsedDef:
    """The parts of one `def` every entry point needs."""

    node: ast.FunctionDef
    diag: Diagnostics
    pyfn: FunctionType


def read_def(pyfn: Any) -> ParsedDef:
    """The def's AST and a Diagnostics that maps its nodes back to the user's file."""
    if not isinstance(pyfn, FunctionType):
        what = type(pyfn).__name__
        hint = "; apply @func once" if what == "Function" else ""
        raise VerifyError(f"@tilefoundry.func decorates a Python def, got a {what}{hint}")
    fast = def_source_lines(pyfn)
    if fast is not None:
        lines, first_line, file = fast
        parsed = _parse_def(pyfn, lines, first_line, file, quiet=True)
        if parsed is not None:
            return parsed
    try:
        lines, first_line = inspect.getsourcelines(pyfn)
    except (OSError, TypeError) as err:
        raise VerifyError(
            f"Function {pyfn.__name__}: its source is not available ({err}); define it in a "
            "file (or through tilefoundry.frontend.parse_source)"
        ) from None
    file = inspect.getsourcefile(pyfn) or pyfn.__code__.co_filename
    parsed = _parse_def(pyfn, lines, first_line, file, quiet=False)
    assert parsed is not None  # not quiet: a failure raised
    return parsed


def _parse_def(
    pyfn: FunctionType, lines: list[str], first_line: int, file: str, *, quiet: bool
) -> ParsedDef | None:
    """The def in `lines` parsed; with `quiet`, None instead of an error (`inspect` then reads
    the lines again and reports what is wrong)."""
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(dedented.splitlines(keepends=True)[0])
    source = SourceMap(file, first_line, indent, dedented)
    diag = Diagnostics(source, pyfn.__name__)
    try:
        tree = with_python_compiler_room(
            lambda: ast.parse(dedented), dedented, SourceSpan(source.file, first_line, indent + 1)
        )
    except SyntaxError as err:
        if quiet:
            return None
        raise VerifyError(
            f"Function {pyfn.__name__}: invalid syntax: {err.msg}",
            location=SourceSpan(
                source.file, (err.lineno or 1) + first_line - 1, (err.offset or 1) + indent
            ),
        ) from None
    node = tree.body[0] if tree.body else None
    one_def = len(tree.body) == 1 and isinstance(node, ast.FunctionDef)
    if quiet and not (one_def and node.name == pyfn.__name__):
        return None
    if not isinstance(node, ast.FunctionDef):
        raise VerifyError(f"Function {pyfn.__name__}: expected a def statement")
    return ParsedDef(node, diag, pyfn)


def _check_arguments(parsed: ParsedDef) -> list[ast.arg]:
    args, diag = parsed.node.args, parsed.diag
    if args.posonlyargs or args.kwonlyargs or args.vararg or args.kwarg:
        diag.refuse(
            parsed.node,
            "only plain positional parameters are supported",
            "drop /, *, *args and **kwargs from the signature",
        )
    if args.defaults:
        diag.refuse(args.defaults[0], "parameters cannot have defaults", "remove the default")
    return list(args.args)


def _refuse_empty_partial(
    parsed: ParsedDef, annotation: ast.AST, env: Environment, lines: list[str] | None = None
) -> None:
    """`P()` evaluates to Partial("sum"), so only the source shows the missing reduction.
    `lines` (the parsed text's lines) lets a one-line annotation without a parenthesis, which
    holds no call, skip the walk."""
    if lines is not None and annotation.lineno == annotation.end_lineno:
        line = lines[annotation.lineno - 1]
        text = line[annotation.col_offset : annotation.end_col_offset]
        if line.isascii() and "(" not in text:  # AST columns count bytes: ASCII lines only
            return
    for node in ast.walk(annotation):
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            callee = _static_name(node.func, env)
            if callee is Partial:
                parsed.diag.refuse(
                    node, "P() needs its reduction", 'write P("sum"), P("max") or P("min")'
                )


def _static_name(node: ast.AST, env: Environment) -> Any:
    if isinstance(node, ast.Name):
        return env.lookup(node.id)
    if isinstance(node, ast.Attribute):
        owner = _static_name(node.value, env)
        return getattr(owner, node.attr, None)
    return None


def _annotation_type(parsed: ParsedDef, node: ast.AST, value: Any, what: str) -> Any:
    """A TensorType from `Tensor[...]`, or a TupleType from a tuple of them (a return)."""
    diag = parsed.diag
    if isinstance(value, TensorSpec):
        try:
            return value.to_type()
        except VerifyError as err:
            raise diag.locate(
                VerifyError(f"Function {diag.function_name}: {what}: {err.message}"), node
            ) from None
    if typing.get_origin(value) is tuple:
        value = typing.get_args(value)
    if isinstance(value, tuple) and value:
        elements = node.elts if isinstance(node, ast.Tuple) else [node] * len(value)
        return TupleType(
            tuple(
                _annotation_type(parsed, n, v, what) for n, v in zip(elements, value, strict=True)
            )
        )
    diag.refuse(node, f'{what} must be annotated Tensor[shape, "dtype", ...], got {value!r}')


def signature(parsed: ParsedDef, env: Environment) -> tuple[tuple[Var, ...], Any]:
    """The parameter Vars (types from the evaluated annotations) and the declared return type."""
    annotations = parsed.pyfn.__annotations__
    text = parsed.diag.source.text
    lines = None if "\r" in text else text.split("\n")  # the parser's own line breaks
    params = []
    for arg in _check_arguments(parsed):
        if arg.annotation is None:
            parsed.diag.refuse(
                arg,
                f"parameter '{arg.arg}' has no annotation",
                f'annotate it: {arg.arg}: Tensor[(...), "f32"]',
            )
        _refuse_empty_partial(parsed, arg.annotation, env, lines)
        value = annotations.get(arg.arg)
        type_ = _annotation_type(parsed, arg.annotation, value, f"parameter '{arg.arg}'")
        metadata: tuple[Metadata, ...] = (parsed.diag.source.span(arg),)
        if isinstance(value, TensorSpec) and value.const:
            metadata += (ConstParam(),)
        params.append(Var(arg.arg, type_, metadata=metadata))
    returns = parsed.node.returns
    declared = None
    if returns is not None:
        _refuse_empty_partial(parsed, returns, env)
        declared = _annotation_type(parsed, returns, annotations.get("return"), "the return")
    return tuple(params), declared


def body_statements(node: ast.FunctionDef) -> list[ast.stmt]:
    """The body without its docstring."""
    body = list(node.body)
    first = body[0] if body else None
    is_docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if is_docstring and isinstance(first.value.value, str):
        body = body[1:]
    return body


def is_prototype(node: ast.FunctionDef) -> bool:
    """A body that is just `pass` declares a dispatch prototype (hir §1.1)."""
    body = body_statements(node)
    return len(body) == 1 and isinstance(body[0], ast.Pass)


def build_body(
    parsed: ParsedDef, env: Environment, params: tuple[Var, ...]
) -> tuple[Expr, TypeInferContext]:
    """Execute the body under one elaboration session; returns the returned Expr."""
    ctx = TypeInferContext()
    builder = BodyBuilder(parsed.diag, env, ctx)
    for param in params:
        env.bind(param.name, param)
    with ElaborationSession(), internal_boundary(parsed.diag, lambda: builder.current):
        outcome = builder.exec_block(body_statements(parsed.node), in_loop=False)
    if outcome is None:
        parsed.diag.refuse(
            parsed.node, "the body never returns a value", "end the function with return <value>"
        )
    return outcome.value, ctx


def return_type_of(declared: Any, body: Expr) -> TensorType | TupleType:
    """The declared return type, or the inferred one (how tuple returns are usually written)."""
    return declared if declared is not None else body.type
