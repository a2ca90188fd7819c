"""Locating frontend diagnostics in the user's file, and the boundary against internal errors.

Every user mistake must surface as a `VerifyError` that points at the exact line and column, so
the frontend maps each AST node of the dedented source back to the file (`SourceMap`). Anything
else escaping while a program is parsed is our bug, and is turned into an `InternalCompilerError`
that still says where in the user's program we were, so a user never sees a bare traceback from
compiler internals.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from tilefoundry.errors import InternalCompilerError, TileFoundryError, VerifyError, format_location
from tilefoundry.ir.core import SourceSpan

T = TypeVar("T")


@dataclass(frozen=True)
class SourceMap:
    """Where the parsed (dedented) text sits in its file: line offset and removed indentation."""

    file: str
    first_line: int
    indent: int
    text: str

    def span(self, node: ast.AST) -> SourceSpan:
        """The 1-based line and column of `node` in the user's file."""
        line = getattr(node, "lineno", 1) + self.first_line - 1
        col = getattr(node, "col_offset", 0) + self.indent + 1
        end_line = getattr(node, "end_lineno", None)
        end_col = getattr(node, "end_col_offset", None)
        return SourceSpan(
            self.file,
            line,
            col,
            None if end_line is None else end_line + self.first_line - 1,
            None if end_col is None else end_col + self.indent + 1,
        )

    def snippet(self, node: ast.AST) -> str:
        """The source text of `node`, for messages such as "evaluating `K // 0` raised ..."."""
        return ast.get_source_segment(self.text, node) or ast.dump(node)


class Diagnostics:
    """Builds located VerifyErrors for one function: `"Function <name>: <what>; <fix>"`."""

    def __init__(self, source: SourceMap, function_name: str):
        self.source = source
        self.function_name = function_name

    def refuse(self, node: ast.AST, what: str, fix: str | None = None) -> NoReturn:
        message = f"Function {self.function_name}: {what}"
        if fix:
            message += f"; {fix}"
        raise VerifyError(message, location=self.source.span(node))

    def locate(self, err: VerifyError, node: ast.AST) -> VerifyError:
        return err.with_location(self.source.span(node))

    def static(self, node: ast.AST, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run compile-time Python on the user's values: whatever it raises is the user's
        expression failing, so it becomes a VerifyError at that expression."""
        try:
            return fn(*args, **kwargs)
        except VerifyError as err:
            raise self.locate(err, node) from None
        except TileFoundryError:
            raise
        except Exception as err:
            self.refuse(
                node,
                f"evaluating `{self.source.snippet(node)}` at compile time raised "
                f"{type(err).__name__}: {err}",
                "fix the expression (it is evaluated while the function is parsed)",
            )


@contextmanager
def internal_boundary(diagnostics: Diagnostics, current: Callable[[], ast.AST | None]) -> Iterator:
    """Locate unlocated VerifyErrors at the node being built and convert internal breakage."""
    try:
        yield
    except VerifyError as err:
        node = current()
        if err.location is None and node is not None:
            raise diagnostics.locate(err, node) from None
        raise
    except TileFoundryError:
        raise
    except RecursionError:
        node = current()
        raise VerifyError(
            f"Function {diagnostics.function_name}: the expression is nested too deeply to "
            "parse; split it into named steps",
            location=diagnostics.source.span(node) if node is not None else None,
        ) from None
    except Exception as err:
        node = current()
        where = format_location(diagnostics.source.span(node)) if node is not None else "unknown"
        raise InternalCompilerError(
            f"frontend: internal error while parsing Function {diagnostics.function_name} "
            f"at {where}: {type(err).__name__}: {err}"
        ) from err
