"""The arrows between packages (DESIGN §2): the IR never depends on an exit, and engines reach
op modules only through the registries."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tilefoundry"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _files(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize("path", _files("ir"), ids=lambda p: str(p.relative_to(SRC)))
def test_ir_never_imports_an_exit(path):
    """DESIGN §2: 'Op modules never import from exits: the lowering value types they use live
    below ir.'"""
    upward = sorted(m for m in _imported_modules(path) if m.startswith("tilefoundry.exits"))
    assert upward == [], f"{path.relative_to(SRC)} imports {upward}"


@pytest.mark.parametrize(
    "path",
    _files("visitor_registry") + _files("evaluator") + _files("passes") + _files("exits"),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_engines_never_import_an_op_module(path):
    """DESIGN §2: 'Engines ... import only visitor_registry, never an op module.'"""
    op_packages = tuple(
        f"tilefoundry.ir.hir.{ns}" for ns in ("math", "tensor", "nn", "shape", "sharding")
    )
    direct = sorted(m for m in _imported_modules(path) if m.startswith(op_packages))
    assert direct == [], f"{path.relative_to(SRC)} imports op modules {direct}"
