"""The arrows between packages (DESIGN §2): the IR never depends on an exit, engines reach op
modules only through the rule tables, and the folders form a DAG.

The DAG, bottom up (issue 24 writes it down; `test_the_folder_graph_is_acyclic` proves it from the
imports, lazy ones included):

    errors, gc_pause
    ir/types            value types, layouts, meshes
    ir/core             Expr, Op, Module, metadata
    rules               the rule tables (imports only ir/core, ir/types)
    analysis            typeinfer driver, access relations, storage anchoring
    sharding            shard propagation, shard reading, block / reshard plans, mesh views
    ir/lowering         the lowering value types op modules write StableHLO with
    ir/hir              Function, regions, the op modules (they register into rules)
    frontend, dsl       the DSL (dsl imports frontend, never the reverse)
    passes, evaluator   the pipeline and the reference evaluator
    exits/*             emitters and runtimes
    inspect, cli        readers of everything above
"""

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "tilefoundry"
FACE = "tilefoundry.visitor_registry"
"""The old name of rules/analysis/sharding, kept for DESIGN §3's imports and for users."""
LAYER_NAMESPACES = ("ir", "exits")
"""Packages whose direct subpackages are layers of their own (ir/types under ir/hir, the
emitters under the runtimes); any other top-level package is one folder."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _imported_modules(path: Path) -> set[str]:
    """Every tilefoundry module `path` imports, at module level or inside a function (a lazy
    import is a dependency too): `from a.b import c` names `a.b.c` when that is a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.add(full if full in MODULES else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n == "tilefoundry" or n.startswith("tilefoundry.")}


def _files(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


def _folder(module: str) -> str:
    """The layer a module belongs to: `tilefoundry.ir.hir.tensor.reshape` -> `ir.hir`,
    `tilefoundry.analysis.typeinfer` -> `analysis`, `tilefoundry.errors` -> `errors`."""
    parts = module.split(".")[1:]
    depth = 2 if parts and parts[0] in LAYER_NAMESPACES else 1
    return ".".join(parts[:depth]) or "tilefoundry"


def _edges(modules) -> dict[str, dict[str, str]]:
    """folder -> imported folder -> one `file imports module` witness."""
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for module in modules:
        path = MODULES[module]
        for target in sorted(_imported_modules(path)):
            a, b = _folder(module), _folder(target)
            if a != b:
                edges[a].setdefault(b, f"{path.relative_to(SRC)} imports {target}")
    return edges


def _cycle(edges: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of the graph as its witnesses, or None when the graph is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for succ in sorted(edges.get(node, {})):
            if state.get(succ) == 1:
                loop = [*path[path.index(succ) :], succ]
                return [edges[a][b] for a, b in pairwise(loop)]
            if succ not in state and (found := visit(succ)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("path", _files("ir"), ids=lambda p: str(p.relative_to(SRC)))
def test_ir_never_imports_an_exit(path):
    """DESIGN §2: 'Op modules never import from exits: the lowering value types they use live
    below ir.'"""
    upward = sorted(m for m in _imported_modules(path) if m.startswith("tilefoundry.exits"))
    assert upward == [], f"{path.relative_to(SRC)} imports {upward}"


@pytest.mark.parametrize(
    "path",
    _files("rules")
    + _files("analysis")
    + _files("sharding")
    + _files("evaluator")
    + _files("passes")
    + _files("exits"),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_engines_never_import_an_op_module(path):
    """DESIGN §2: 'Engines ... import only [the rule tables], never an op module.'"""
    op_packages = tuple(
        f"tilefoundry.ir.hir.{ns}" for ns in ("math", "tensor", "nn", "shape", "sharding")
    )
    direct = sorted(m for m in _imported_modules(path) if m.startswith(op_packages))
    assert direct == [], f"{path.relative_to(SRC)} imports op modules {direct}"


@pytest.mark.parametrize("path", _files("inspect"), ids=lambda p: str(p.relative_to(SRC)))
def test_the_inspector_imports_no_exit(path):
    """Issue 24: `show` and the report describe what the SPMD exit wrote from the record their
    caller (the CLI) passes in, so reading IR never loads an exit."""
    exits = sorted(m for m in _imported_modules(path) if m.startswith("tilefoundry.exits"))
    assert exits == [], f"{path.relative_to(SRC)} imports {exits}"


@pytest.mark.parametrize("path", _files("rules"), ids=lambda p: str(p.relative_to(SRC)))
def test_rule_tables_import_only_the_ir_value_layers(path):
    """Issue 24: the rule tables import only ir/core and ir/types, so every layer may read them."""
    allowed = (
        "tilefoundry.errors",
        "tilefoundry.rules",
        "tilefoundry.ir.core",
        "tilefoundry.ir.types",
    )
    outside = sorted(
        m
        for m in _imported_modules(path)
        if not any(m == a or m.startswith(a + ".") for a in allowed)
    )
    assert outside == [], f"{path.relative_to(SRC)} imports {outside}"


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES.values() if not p.is_relative_to(SRC / "visitor_registry")],
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_nothing_in_the_package_imports_the_old_face(path):
    """Issue 24: `visitor_registry` is a face for users; the code imports the homes (`rules`,
    `analysis`, `sharding`), so the face can be deleted without touching the compiler."""
    old = sorted(m for m in _imported_modules(path) if m == FACE or m.startswith(FACE + "."))
    assert old == [], (
        f"{path.relative_to(SRC)} imports {old}: import from tilefoundry.rules (the tables), "
        "tilefoundry.analysis (typeinfer, access relations, storage) or tilefoundry.sharding "
        "(propagation, shard reading, plans, mesh views)"
    )


def test_the_ir_and_engine_folders_are_acyclic():
    """Issue 24: no import circle between ir/* and the rule tables / engines."""
    layers = ("errors", "ir", "rules", "analysis", "sharding")
    cycle = _cycle(_edges(m for m in MODULES if _folder(m).split(".")[0] in layers))
    assert cycle is None, "import circle between folders:\n  " + "\n  ".join(cycle)


@pytest.mark.parametrize("package", ["exits", "frontend"])
def test_the_modules_of_a_package_are_acyclic(package):
    """Issue 24: no import circle module by module among the emitters and runtimes (the
    one-device and SPMD emitters share their loop helpers and module header from modules of
    their own) nor in the frontend (`tile` and `TileWindow` live apart from the builders)."""
    inside = [m for m in MODULES if m.startswith(f"tilefoundry.{package}.")]
    edges: dict[str, dict[str, str]] = defaultdict(dict)
    for module in inside:
        for target in sorted(_imported_modules(MODULES[module])):
            if target in inside and target != module:
                edges[module].setdefault(
                    target, f"{MODULES[module].relative_to(SRC)} imports {target}"
                )
    cycle = _cycle(edges)
    assert cycle is None, "import circle between modules:\n  " + "\n  ".join(cycle)


def test_the_face_re_exports_the_moved_modules_themselves():
    """An old submodule path is the moved module (one registry object, never a copy)."""
    import tilefoundry.visitor_registry.access_relation as old_relation
    import tilefoundry.visitor_registry.shard_propagate as old_propagate

    import tilefoundry.analysis.access_relation
    import tilefoundry.sharding.shard_propagate

    assert old_relation is tilefoundry.analysis.access_relation
    assert old_propagate is tilefoundry.sharding.shard_propagate
