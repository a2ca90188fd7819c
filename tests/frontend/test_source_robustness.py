"""The frontend under hostile use (issue 28: "the recursion limit is not restored after concurrent
parses"; "`parse_source(None)` raises a bare AttributeError"; "a 60,000-term expression
segfaults": what to build, "exit 1 with a located ... message ... never a signal").

The CLI probes of deep expressions are in tests/cli/test_hostile_inputs.py; these run in process.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from support.threads import run_together
from tilefoundry.errors import VerifyError
from tilefoundry.frontend import parse_source

HEAD = "from tilefoundry import Tensor, func\n\n"


def _returning(expression: str) -> str:
    return HEAD + f'@func\ndef f(x: Tensor[(4,), "f32"]):\n    return {expression}\n'


def test_the_recursion_limit_is_restored_after_concurrent_deep_parses():
    """Each source needs more room than the default limit gives CPython's compiler; six threads
    parse together, round after round."""
    before = sys.getrecursionlimit()
    source = "x = 1\ny = " + " + ".join(["x"] * 5000) + "\n"
    for _ in range(20):
        assert run_together(lambda i: parse_source(source, f"deep{i}.py"), 6) == []
    assert sys.getrecursionlimit() == before


def test_a_too_deep_expression_is_located_at_its_statement():
    with pytest.raises(VerifyError, match="nested too deeply") as refused:
        parse_source(_returning("-" * 100_000 + "x"), "negs.py")
    location = refused.value.location
    assert (location.file, location.line, location.col) == ("negs.py", 5, 5)


def test_the_caller_keeps_its_recursion_limit_when_a_parse_fails():
    before = sys.getrecursionlimit()
    with pytest.raises(VerifyError):
        parse_source(_returning("+".join(["x"] * 200_000)), "wide.py")
    assert sys.getrecursionlimit() == before


@pytest.mark.slow
def test_60000_chained_adds_do_not_overflow_the_c_stack():
    """In a child process: a C stack overflow is a signal, which would end the test run."""
    program = (
        "from tilefoundry.frontend import parse_source\n"
        f"parse_source({_returning('+'.join(['x'] * 60_000))!r}, 'wide.py')\n"
        "print('parsed')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "parsed\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None,), "text must be a str, got NoneType"),
        ((b"x = 1",), "text must be a str, got bytes; decode it first"),
        (("x = 1", None), "filename must be a str, got NoneType"),
        (("x = 1", "f.py", 3), "namespace must be a mapping of names to values"),
    ],
)
def test_wrong_arguments_are_named(args, message):
    with pytest.raises(VerifyError, match=message):
        parse_source(*args)
