"""2,000 nested @func calls through every command, under a recursion limit of 200.

Issue 20: "deep programs ... 200 nested `@func` calls at `run` (163 at most) or 1,000 at `check`
... all `RecursionError`. Walks must not depend on Python's recursion limit" and "Iterative
(non-recursive) IR walks everywhere a user program's depth reaches: frontend expression
building, typeinfer, passes, printers, evaluator, emitters".

Each case runs the commands in a fresh interpreter whose recursion limit is 200, far below the
call depth, so any walk that recurses once per nesting level (the evaluator's calls, the SPMD
exit's and the Pallas kernel's inlining, elaboration through layout-unconstrained parameters,
the verifier) fails it, and nothing may raise the limit back (the driver rejects any call of
`sys.setrecursionlimit` but the one that gives CPython's own compiler room).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess

DEPTH = 2000
LIMIT = 200

HEAD = """\
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

TP = make_mesh((8,), ("tp",))
"""

PLAIN = 'Tensor[(4,), "f32"]'
SHARDED = 'Tensor[(16, 64 @ TP.tp), "f32"]'
UNCONSTRAINED = 'Tensor[(16, 64), "f32"]'


def chain(callee_type: str, entry_type: str | None = None, returns: bool = True) -> str:
    """g0(x) = x + x and g_i(x) = g_{i-1}(x) + x, so g_{DEPTH-1}(x) = (DEPTH + 1) * x; with
    `entry_type`, an entry `f` of that type calls the chain's last function."""
    ret = f" -> {callee_type}" if returns else ""
    text = f"@func\ndef g0(x: {callee_type}){ret}:\n    return x + x\n"
    for i in range(1, DEPTH):
        text += f"\n@func\ndef g{i}(x: {callee_type}){ret}:\n    return g{i - 1}(x) + x\n"
    if entry_type is not None:
        text += f"\n@func\ndef f(x: {entry_type}):\n    return g{DEPTH - 1}(x)\n"
    return HEAD + text


GUARD = f"""
import sys
sys.setrecursionlimit({LIMIT})
_set = sys.setrecursionlimit


def _guarded(value):
    # only CPython's own compiler gets room (frontend/depth.py, around `compile`/`ast.parse`)
    caller = sys._getframe(1).f_code.co_filename
    if not caller.endswith("tilefoundry/frontend/depth.py"):
        raise AssertionError(f"sys.setrecursionlimit({{value}}) called from {{caller}}")
    _set(value)


sys.setrecursionlimit = _guarded
"""

DRIVER = (
    GUARD
    + """
import json
from tilefoundry.cli import main

print(json.dumps([main(argv) for argv in json.loads(sys.argv[1])]))
"""
)


def run_commands(commands: list[list[str]]) -> tuple[list[int], str]:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(commands)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


CASES = {
    # a plain chain: check, run (reference and fused), show, show --fused, emit, the Pallas
    # kernel (one CTA, every call inlined into its trace)
    "plain": (
        chain(PLAIN),
        [["check"], ["run"], ["show"], ["show", "--fused"], ["emit"], ["emit", "--pallas"]],
    ),
    # a sharded chain: the simulated mesh, the SPMD exit's inlining (show describes the
    # collectives the exit emits; emit writes the SPMD module)
    "sharded": (chain(SHARDED, SHARDED), [["check"], ["run"], ["show"], ["emit"]]),
    # layout-unconstrained parameters given a sharded argument: each call elaborates its
    # callee for the argument's layout (hir §1.1), 2,000 elaborations deep
    "elaborated": (
        chain(UNCONSTRAINED, SHARDED, returns=False),
        [["check"], ["run"], ["emit"]],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_thousand_nested_calls_need_no_recursion_limit(tmp_path, case):
    text, commands = CASES[case]
    path = tmp_path / f"{case}.py"
    path.write_text(text, encoding="utf-8")
    argvs = [[argv[0], str(path), *argv[1:]] for argv in commands]
    statuses, stderr = run_commands(argvs)
    assert statuses == [0] * len(argvs), stderr[-3000:]
    assert "RecursionError" not in stderr and "internal error" not in stderr


EVALUATE = (
    GUARD
    + f"""
import numpy as np
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source

objects = parse_source(open(sys.argv[1]).read(), sys.argv[1])
np.save(sys.argv[2], evaluate(objects["g{DEPTH - 1}"], np.arange(4, dtype=np.float32)))
"""
)


def test_evaluate_runs_two_thousand_nested_calls_under_a_low_limit(tmp_path):
    """DESIGN §3 `evaluate` on the chain; the expected value is (DEPTH + 1) * x by algebra."""
    path = tmp_path / "chain.py"
    path.write_text(chain(PLAIN), encoding="utf-8")
    out = tmp_path / "out.npy"
    done = subprocess.run(
        [sys.executable, "-c", EVALUATE, str(path), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(np.load(out), (DEPTH + 1) * x)
