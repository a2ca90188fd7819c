"""A def's source lines from its code object, without tokenising its body.

`inspect.getsourcelines` finds where a def ends by running Python's tokenizer over the whole def
(≈28 ms for a 32-layer decoder written as one function). The code object already knows: the
last line any of its instructions (or a nested code object's) comes from. After it only lines
that compile to nothing can still belong to the def (a trailing `pass`, a comment); those are
the following lines indented deeper than the `def`. The caller falls back to `inspect` when this
gives nothing or text that does not parse as one def.
"""

from __future__ import annotations

import linecache
from types import CodeType, FunctionType


def _last_line(code: CodeType) -> int:
    last = code.co_firstlineno
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, CodeType):
            last = max(last, _last_line(const))
    return last


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def def_source_lines(pyfn: FunctionType) -> tuple[list[str], int, str] | None:
    """(the def's lines with its decorators, its first line number, its file), or None."""
    code = pyfn.__code__
    file = code.co_filename
    linecache.checkcache(file)
    lines = linecache.getlines(file, pyfn.__globals__)
    first = code.co_firstlineno - 1
    if not lines or not 0 <= first < len(lines):
        return None
    head = lines[first].lstrip(" \t")
    if not head.startswith(("@", "def ", "def\t", "async ")):
        return None
    end = min(_last_line(code), len(lines))  # 1-based, inclusive
    indent = _indent(lines[first])
    while end < len(lines):
        following = lines[end]
        if following.strip() and _indent(following) <= indent:
            break
        end += 1
    while end > first + 1 and not lines[end - 1].strip():
        end -= 1
    return lines[first:end], first + 1, file
