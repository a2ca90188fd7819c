"""Golden printouts of the valid programs in `programs.py` (hir §1, parser §1.1–§5)."""

import pytest

from frontend import programs
from tilefoundry.inspect import format_ir
from tilefoundry.ir.core import Module
from tilefoundry.ir.hir import Function

PROGRAMS = sorted(
    name
    for name, value in vars(programs).items()
    if isinstance(value, Function | Module) and not getattr(value, "specializations", ())
)


def test_there_are_enough_programs():
    assert len(PROGRAMS) >= 30


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_prints_as_golden(name, golden):
    golden(f"frontend/{name}.txt", format_ir(getattr(programs, name)))
