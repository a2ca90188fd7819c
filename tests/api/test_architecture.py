"""The arrows between packages (DESIGN §2): the IR never depends on an exit, engines reach op
modules only through the rule tables, and the folders form a DAG.

The DAG, bottom up (issue 24 writes it down; `test_the_folder_graph_is_acyclic` proves it from the
imports, lazy ones included); a folder imports only folders listed before it:

    errors, gc_pause
    ir/types            value types, layouts, meshes
    ir/core, ir/lowering  Expr, Op, Module, metadata; the lowering value types op modules use
    rules               the rule tables (imports only ir/core, ir/types)
    analysis            typeinfer driver, access relations, storage anchoring
    sharding            shard propagation, shard reading, block / reshard plans, mesh views
    ir/hir              Function, regions, the op modules (they register into rules)
    ir/text             the canonical printer
    frontend, dsl       the DSL (dsl imports frontend, never the reverse)
    autodiff            reverse mode (builds backward ops with the frontend's surface builder)
    passes, evaluator   the pipeline and the reference evaluator
    exits/stablehlo     the emitters (one device, SPMD)
    exits/runtimes      XLA on one or N devices, IREE, several processes
    exits/pallas        cta-mesh kernels
    inspect             the report and sharding in words (imports no exit)
    demo, cli           the demo and the command line

and the faces that keep old names importing (`visitor_registry`, `exits.xla`) and the public
surface (`tilefoundry/__init__`), which import only what they re-export.
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
    + _files("exits")
    + _files("autodiff"),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_engines_never_import_an_op_module(path):
    """DESIGN §2: 'Engines ... import only [the rule tables], never an op module.' The autodiff
    transform is an engine too: it reaches each op's VJP rule through the registry (§4.18)."""
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


def test_the_folder_graph_is_acyclic():
    """Issue 24: no import circle between folders: ir/* and the tables/engines, passes and
    inspect, dsl and frontend, the emitters and the runtimes."""
    cycle = _cycle(_edges(MODULES))
    assert cycle is None, "import circle between folders:\n  " + "\n  ".join(cycle)


@pytest.mark.parametrize("path", _files("passes"), ids=lambda p: str(p.relative_to(SRC)))
def test_passes_never_import_the_inspector(path):
    """Issue 24: a pass prints IR with the printer beside the IR (`ir/text`), never through
    `inspect`, which reads passes' results (the fusion report) and so sits above them."""
    found = sorted(m for m in _imported_modules(path) if m.startswith("tilefoundry.inspect"))
    assert found == [], f"{path.relative_to(SRC)} imports {found}"


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
