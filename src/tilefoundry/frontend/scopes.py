"""The parser's lexical environment and `with Mesh(...) as m` scopes (hir §1.1, parser §1.6).

HIR has no binding nodes: a name maps to a value (an IR node or a compile-time Python value) and
every later use reads that very node, which is how sharing becomes DAG edges. Loops are the one
place the environment shapes IR: a name assigned in a loop body that was bound before the loop is
a carry, and a name first bound inside a loop has no value after it (HIR has no "last iteration"
value), which the environment remembers so the error can say so.

Mesh scopes emit no IR node. A Call built inside one records the enclosing scopes as `MeshScope`
metadata, which is how `@module` later checks that each scope names one of its topology levels.
The seed's `Mesh(topology="cta", ...)` spelling is the authoring form; the frontend builds the
Mesh itself (`make_mesh(layout, names, topology)`), so a scope maps one whole topology level.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from tilefoundry.ir.core import Metadata, SourceSpan
from tilefoundry.ir.types.shard import Mesh

_MISSING = object()


@dataclass(frozen=True)
class MeshScope(Metadata):
    """The `with Mesh(...)` scopes enclosing a Call, outermost first, with their `with` spans."""

    scopes: tuple[tuple[Mesh, SourceSpan], ...]

    def topology_names(self) -> tuple[tuple[str, SourceSpan], ...]:
        return tuple((mesh.topology.name, span) for mesh, span in self.scopes)


class Environment:
    """Name → value for one function body, with the closure/globals chain behind it."""

    def __init__(self, fn: FunctionType, outer_locals: dict[str, Any]):
        self.local: dict[str, Any] = {}
        self.loop_only: dict[str, int] = {}  # name -> line of its in-loop assignment
        self.meshes: list[tuple[Mesh, SourceSpan]] = []
        self._captured = _captured(fn, outer_locals)

    def lookup(self, name: str) -> Any:
        """The value of `name`, or `_MISSING` (callers turn that into a located error)."""
        if name in self.local:
            return self.local[name]
        return self._captured.get(name, _MISSING)

    def bind(self, name: str, value: Any) -> None:
        self.local[name] = value
        self.loop_only.pop(name, None)

    def forget(self, name: str, line: int) -> None:
        """`name` was bound only inside a loop: it has no value after the loop."""
        self.local.pop(name, None)
        self.loop_only[name] = line

    @contextmanager
    def mesh_scope(self, name: str | None, mesh: Mesh, span: SourceSpan) -> Iterator[None]:
        """Bind `as name` for the block only and record the scope for the Calls built inside."""
        saved = self.local.get(name, _MISSING) if name else _MISSING
        if name:
            self.local[name] = mesh
        self.meshes.append((mesh, span))
        try:
            yield
        finally:
            self.meshes.pop()
            if name:
                if saved is _MISSING:
                    self.local.pop(name, None)
                else:
                    self.local[name] = saved

    def scope_metadata(self) -> tuple[Metadata, ...]:
        return (MeshScope(tuple(self.meshes)),) if self.meshes else ()


def is_missing(value: Any) -> bool:
    return value is _MISSING


def _captured(fn: FunctionType, outer_locals: dict[str, Any]) -> dict[str, Any]:
    """Closure cells first, then the decorating frame's locals (a class body's siblings), then
    the function's globals and builtins — Python's own lookup order for a nested function."""
    found: dict[str, Any] = dict(vars(builtins))
    found.update(fn.__globals__)
    found.update(outer_locals)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        try:
            found[name] = cell.cell_contents
        except ValueError:  # an empty cell: the name is assigned later in the outer scope
            continue
    return found


def assigned_names(statements: list[ast.stmt]) -> dict[str, ast.AST]:
    """Every plain name a block assigns (nested blocks included), with its first target node.

    Loop targets are left out: an inner loop's induction variable is local to that loop.
    """
    found: dict[str, ast.AST] = {}
    for statement in statements:
        for node in ast.walk(statement):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                for leaf in _target_names(target):
                    found.setdefault(leaf.id, leaf)
    return found


def _target_names(target: ast.AST) -> list[ast.Name]:
    """The names an assignment target binds: `acc[:, i] = v` rebinds `acc` (not `i`)."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, ast.Subscript):
        return _target_names(target.value) if isinstance(target.value, ast.Name) else []
    if isinstance(target, ast.Tuple | ast.List):
        return [n for element in target.elts for n in _target_names(element)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []
