"""Names a program gives its IR objects are printed as written by every printer, table and
message, so none may hold a control character (issue 28: "control characters in names and
escapes in function names reach the terminal")."""

from __future__ import annotations

import pytest

from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Module, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import DimVar, make_tensor_type
from tilefoundry.ir.types.shard import Topology

T = make_tensor_type((4,))

BUILDERS = {
    "DimVar": lambda name: DimVar(name, 1, 8),
    "Function": lambda name: Function(name, (Var("x", T),), None, T),
    "Module": lambda name: Module(name, ()),
    "Topology": lambda name: Topology(name, 2),
}


@pytest.mark.parametrize("owner", sorted(BUILDERS))
@pytest.mark.parametrize("name", ["f\x1b[2Jx", "bell\x07", "line\nbreak", "cr\r", "nul\x00"])
def test_a_control_character_in_a_name_is_refused(owner, name):
    with pytest.raises(VerifyError, match=f"{owner}: name .* holds a control character"):
        BUILDERS[owner](name)


@pytest.mark.parametrize("owner", sorted(BUILDERS))
@pytest.mark.parametrize("name", ["[bold red]N[/", "函数", "τ", "a b"])
def test_printable_names_are_kept_as_written(owner, name):
    assert BUILDERS[owner](name).name == name
