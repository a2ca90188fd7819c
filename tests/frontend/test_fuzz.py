"""Mutation fuzzing: a valid program with a token or line deleted, duplicated or swapped either
still parses or is refused with a VerifyError — never a raw exception (DESIGN §3)."""

import ast
import random
import re
from pathlib import Path

import pytest

from frontend import programs
from tilefoundry.errors import VerifyError
from tilefoundry.frontend import parse_source

HEADER = """\
import numpy as np
from tilefoundry.dsl import tf
from tilefoundry.frontend import ConstTensor, Tensor, func, module, tile
from tilefoundry.ir.core import DimVarRangePat
from tilefoundry.ir.types import DimVar
from tilefoundry.ir.types.shard import B, Layout, Mesh, P, ShardLayout, Topology, make_mesh
MESH = make_mesh((2, 4), ("x", "y"))
TP = make_mesh((4,), ("tp",))
S = DimVar("S", 1, 129)
SCALE = np.float32(0.125)
BIAS = np.arange(4, dtype=np.float32)
REPLICATED_TP = ShardLayout(Layout((8, 32)), (B,), TP)
"""

SEEDS = [
    "double",
    "elementwise_chain",
    "comparisons_and_logic",
    "slicing",
    "multi_carry_loop",
    "nested_loops",
    "tiled_accumulate",
    "partial_signature",
    "column_row_parallel_mlp",
    "unpack_topk",
    "Dispatch",
    "MeshScoped",
    "calls_between_functions",
]
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")
TOKEN = re.compile(r"\w+|[^\w\s]")


PROGRAM_TEXT = Path(programs.__file__).read_text()
PROGRAM_TREE = ast.parse(PROGRAM_TEXT)


def _body(name: str) -> str:
    """The decorated definition of `name` in programs.py, decorators included."""
    for node in PROGRAM_TREE.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = PROGRAM_TEXT.splitlines(keepends=True)
            return "".join(lines[first - 1 : node.end_lineno])
    raise LookupError(name)


def _mutate(text: str, rng: random.Random) -> str:
    kind = rng.choice(["delete", "duplicate", "swap"])
    if rng.random() < 0.3:
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        if kind == "delete":
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        else:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        return "".join(lines)
    spans = [m.span() for m in TOKEN.finditer(text)]
    a, b = spans[rng.randrange(len(spans))]
    if kind == "delete":
        return text[:a] + text[b:]
    if kind == "duplicate":
        return text[:b] + " " + text[a:b] + text[b:]
    c, d = spans[rng.randrange(len(spans))]
    if (c, d) < (a, b):
        (a, b), (c, d) = (c, d), (a, b)
    if b > c:
        return text
    return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]


@pytest.mark.parametrize("seed_name", SEEDS)
def test_mutants_parse_or_are_refused(seed_name):
    rng = random.Random(seed_name)
    original = _body(seed_name)
    if seed_name == "calls_between_functions":
        original = _body("double") + "\n\n" + original
    outcomes = {"parsed": 0, "refused": 0}
    for attempt in range(25):
        text = HEADER + _mutate(original, rng)
        try:
            parse_source(text, f"mutant_{seed_name}_{attempt}.py")
        except VerifyError as err:
            assert err.location is not None, f"unlocated refusal for mutant:\n{text}\n{err}"
            outcomes["refused"] += 1
        else:
            outcomes["parsed"] += 1
    assert outcomes["refused"] > 0
