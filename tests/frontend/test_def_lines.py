"""Def source lines from the code object (issue 19: "source lines without tokenising the file"):
the def `read_def` parses is the one `inspect.getsourcelines` reads, for defs whose end the code
object does not show directly (a trailing `pass` or comment, nested defs, decorators, a string
continued at column 0)."""

from __future__ import annotations

import ast
import inspect
import textwrap

from tilefoundry.frontend.def_lines import def_source_lines
from tilefoundry.frontend.parse import read_def


def _decorate(fn):
    return fn


@_decorate
def decorated(x):
    y = x + 1
    return y


def nested_last(x):
    def inner(z):
        return z * 2

    return inner


def trailing_pass(x):
    return x
    pass


def trailing_comment(x):
    return x
    # a comment inside the def


def string_at_column_zero(x):
    text = """first
second at column 0"""
    return text


def no_code_body(x):
    """Only a docstring."""


def trailing_string_at_column_zero(x):
    return x
    """dangling
at column 0"""


class Holder:
    def method(self, x):
        return (x, x)


CASES = [
    decorated,
    nested_last,
    trailing_pass,
    trailing_comment,
    string_at_column_zero,
    no_code_body,
    Holder.method,
]


def _dump(lines: list[str]) -> str:
    return ast.dump(ast.parse(textwrap.dedent("".join(lines))))


def test_fast_lines_parse_to_the_same_def_as_inspect():
    for fn in CASES:
        fast = def_source_lines(fn)
        assert fast is not None, fn.__name__
        lines, first, file = fast
        expected_lines, expected_first = inspect.getsourcelines(fn)
        assert first == expected_first, fn.__name__
        assert file == inspect.getsourcefile(fn), fn.__name__
        assert _dump(lines) == _dump(expected_lines), fn.__name__


def test_read_def_gives_the_whole_def():
    node = read_def(trailing_pass).node
    assert [type(s).__name__ for s in node.body] == ["Return", "Pass"]


def test_a_def_the_code_object_cannot_end_falls_back_to_inspect():
    """The trailing string compiles to nothing and its last line is at column 0: the fast lines
    stop inside it, do not parse, and `inspect` reads the def."""
    node = read_def(trailing_string_at_column_zero).node
    assert [type(s).__name__ for s in node.body] == ["Return", "Expr"]
