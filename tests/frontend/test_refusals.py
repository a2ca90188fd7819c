"""Refused programs: each is a located VerifyError whose message is golden (parser §5 rules,
DESIGN §3 error contract); none may escape as a raw Python exception."""

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from frontend import refused_programs
from tilefoundry.errors import VerifyError
from tilefoundry.frontend import func, parse_source
from tilefoundry.ir.hir import Function

CASES = sorted(
    name
    for name, value in vars(refused_programs).items()
    if inspect.isfunction(value)
    and value.__module__ == refused_programs.__name__
    and name != "helper"
)

TEXT_CASES = {
    "syntax_error": "def f(x:\n    return x\n",
    "tuple_axes_in_annotation": (
        "from tilefoundry.frontend import Tensor, func\n"
        "from tilefoundry.ir.types.shard import make_mesh\n"
        "m = make_mesh((2, 4), ('x', 'y'))\n"
        "@func\n"
        "def f(x: Tensor[(16 @ (m.x, m.y), 4), 'f32']):\n"
        "    return x\n"
    ),
    "module_level_name_error": "y = undefined_thing + 1\n",
    "mesh_scope_names_no_module_level": (
        "from tilefoundry.dsl import tf\n"
        "from tilefoundry.frontend import Tensor, func, module\n"
        "from tilefoundry.ir.types.shard import Mesh\n"
        "@module\n"
        "class K:\n"
        "    @func\n"
        "    def f(x: Tensor[(8,), 'f32']):\n"
        "        with Mesh(topology='cta', layout=(4,)) as c:\n"
        "            y = tf.exp(x)\n"
        "        return y\n"
    ),
    "dispatch_gap": (
        "from tilefoundry.frontend import Tensor, func, module\n"
        "from tilefoundry.ir.core import DimVarRangePat\n"
        "from tilefoundry.ir.types import DimVar\n"
        "S = DimVar('S', 1, 9)\n"
        "@module\n"
        "class D:\n"
        "    @func\n"
        "    def f(x: Tensor[(S,), 'f32']) -> Tensor[(S,), 'f32']:\n"
        "        pass\n"
        "    @f.specialize(DimVarRangePat('S', 1, 4))\n"
        "    def low(x: Tensor[(S,), 'f32']) -> Tensor[(S,), 'f32']:\n"
        "        return x\n"
    ),
}


def _refusal(fn) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        func(fn)
    return info.value


def _strip(text: str) -> str:
    return text.replace(str(Path(refused_programs.__file__).parent) + "/", "")


def test_enough_refusals():
    assert len(CASES) + len(TEXT_CASES) >= 40


@pytest.mark.parametrize("name", CASES)
def test_refusal_points_into_the_function(name):
    fn = getattr(refused_programs, name)
    err = _refusal(fn)
    lines, first = inspect.getsourcelines(fn)
    assert err.location is not None, str(err)
    assert Path(err.location.file).name == "refused_programs.py"
    assert first <= err.location.line < first + len(lines), str(err)
    # exact: the column is where a syntax node of that line starts (issue 20: `col >= 1` held
    # for any column), read off Python's own parse of the function
    tree = ast.parse(textwrap.dedent("".join(lines)))
    indent = len(lines[0]) - len(lines[0].lstrip())
    starts = {
        (first + node.lineno - 1, node.col_offset + indent + 1)
        for node in ast.walk(tree)
        if hasattr(node, "col_offset")
    }
    assert (err.location.line, err.location.col) in starts, str(err)


def test_refusal_messages_are_golden(golden):
    lines = []
    for name in CASES:
        lines.append(f"{name}: {_strip(str(_refusal(getattr(refused_programs, name))))}")
    for name, text in TEXT_CASES.items():
        with pytest.raises(VerifyError) as info:
            parse_source(text, f"{name}.py")
        lines.append(f"{name}: {info.value}")
    golden("frontend/refusals.txt", "\n".join(lines) + "\n")


def test_the_valid_helper_parses():
    assert isinstance(refused_programs.double_it, Function)
