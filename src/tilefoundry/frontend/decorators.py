"""`@func`, `@f.specialize(...)` and `@module` (parser §1.1).

`@func` returns the typed hir `Function` itself, so it prints, elaborates and goes into a Module
like any other. Sibling functions of a `@module` class live in the class body's namespace, which
neither the function's globals nor its closure can see, so the decorators also capture the locals
of the frame that applies them (Python's own lookup order is kept: closure, then that frame, then
globals).

`Function.specialize(pattern, body)` is the IR-level API; the DSL spelling `@f.specialize(pattern)`
takes no body. A prototype built by `@func` therefore carries an instance-level `specialize` that
accepts both forms: with a body it is the IR method, without one it returns the decorator that
parses the variant's def.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.frontend.errors import internal_boundary
from tilefoundry.frontend.parse import (
    ParsedDef,
    build_body,
    is_prototype,
    read_def,
    return_type_of,
    signature,
)
from tilefoundry.frontend.scopes import Environment, MeshScope
from tilefoundry.gc_pause import gc_paused
from tilefoundry.ir.core import DimVarRangePat, Expr, Module, SourceSpan, get_metadata
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types.shard import Topology


def _caller_locals(depth: int) -> dict[str, Any]:
    """A snapshot of the decorating frame's locals (a class body while its class is built)."""
    return dict(sys._getframe(depth + 1).f_locals)


def func(fn: Callable | None = None) -> Any:
    """Parse a Python function into a typed hir Function (`@func` or `@func()`)."""
    outer = _caller_locals(1)
    if fn is None:
        return lambda pyfn: parse_function(pyfn, outer)
    return parse_function(fn, outer)


def _typed(
    parsed: ParsedDef,
    build: Callable[[], Function],
    *,
    check: bool = True,
    ctx: TypeInferContext | None = None,
) -> Function:
    """Build and type-check a Function; errors without a location point at the def.

    `ctx` is the context the body was typed in as it was built (`build_body`): checking the
    Function in it types only what is new (the Function itself), not the whole body again.
    A prototype is not type-checked here: it has no body yet, and the typeinfer cache would hash
    it while it still accumulates variants (which Function refuses).
    """
    with internal_boundary(parsed.diag, lambda: parsed.node):
        fn = build()
        if check:
            (ctx or TypeInferContext()).infer(fn)
    return fn


@gc_paused
def parse_function(pyfn: Any, outer_locals: dict[str, Any]) -> Function:
    parsed = read_def(pyfn)
    env = Environment(parsed.pyfn, outer_locals)
    with internal_boundary(parsed.diag, lambda: parsed.node):
        params, declared = signature(parsed, env)
    span = parsed.diag.source.span(parsed.node)
    if is_prototype(parsed.node):
        if declared is None:
            parsed.diag.refuse(
                parsed.node,
                "a dispatch prototype (a body of just pass) needs a return annotation",
                "annotate the return type: -> Tensor[...]",
            )
        base = _typed(
            parsed,
            lambda: Function(pyfn.__name__, params, None, declared, metadata=(span,)),
            check=False,
        )
        object.__setattr__(base, "specialize", _specializer(base))
        return base
    body, ctx = build_body(parsed, env, params)
    return _typed(
        parsed,
        lambda: Function(
            pyfn.__name__, params, body, return_type_of(declared, body), metadata=(span,)
        ),
        ctx=ctx,
    )


def _specializer(base: Function) -> Callable[..., Any]:
    def specialize(
        pattern: DimVarRangePat, body: Expr | None = None, *, label: str | None = None
    ) -> Any:
        if body is not None:
            return Function.specialize(base, pattern, body, label=label)
        outer = _caller_locals(1)
        return lambda pyfn: parse_variant(base, pattern, pyfn, outer)

    return specialize


def parse_variant(
    base: Function, pattern: Any, pyfn: Any, outer_locals: dict[str, Any]
) -> Function:
    """The def is the variant's body over the base's own parameters; its identifier is only
    the display label (hir §1.1)."""
    parsed = read_def(pyfn)
    env = Environment(parsed.pyfn, outer_locals)
    with internal_boundary(parsed.diag, lambda: parsed.node):
        params, declared = signature(parsed, env)
    mine = [(p.name, p.type) for p in params]
    theirs = [(p.name, p.type) for p in base.params]
    if mine != theirs or (declared is not None and declared != base.return_type):
        parsed.diag.refuse(
            parsed.node,
            f"variant '{pyfn.__name__}' must repeat the signature of {base.name} exactly",
            "copy the base's parameters and return annotation",
        )
    if not isinstance(pattern, DimVarRangePat):
        parsed.diag.refuse(
            parsed.node,
            f"specialize takes a DimVarRangePat, got {pattern!r}",
            'write @f.specialize(DimVarRangePat("S", lo, hi))',
        )
    body, _ = build_body(parsed, env, base.params)
    return _typed(parsed, lambda: Function.specialize(base, pattern, body, label=pyfn.__name__))


def module(
    cls: type | None = None,
    *,
    name: str | None = None,
    target: Any = None,
    topologies: Any = None,
) -> Any:
    """Collect a class's `@func` functions, in definition order, into a Module."""

    levels = _topology_levels(topologies)

    def build(klass: type) -> Module:
        if not isinstance(klass, type):
            raise VerifyError(
                f"@tilefoundry.module decorates a class, got a {type(klass).__name__}; apply it "
                "once, to a class whose body holds @func functions"
            )
        functions = [
            v for v in vars(klass).values() if isinstance(v, Function) and not v.specializations
        ]
        try:
            mod = Module(name or klass.__name__, functions, target, levels)
        except VerifyError as err:
            raise err.with_location(_blame(err, functions, klass)) from None
        check_mesh_scopes(mod)
        return mod

    return build if cls is None else build(cls)


def _topology_levels(topologies: Any) -> tuple | None:
    """One Topology or a tuple of Topology objects / level names (parser §1.1)."""
    if topologies is None:
        return None
    levels = (topologies,) if isinstance(topologies, Topology | str) else topologies
    if not isinstance(levels, tuple | list) or not all(
        isinstance(t, Topology | str) for t in levels
    ):
        raise VerifyError(
            f"@tilefoundry.module: topologies must be Topology objects or level names, got "
            f'{topologies!r}; write topologies=(Topology("cta", 4),)'
        )
    return tuple(levels)


def _blame(err: VerifyError, functions: list[Function], klass: type) -> SourceSpan | None:
    """Where a Module refusal points: the function it names (a sealing rule such as envelope
    coverage), else the class statement."""
    for fn in functions:
        if err.message.startswith(f"Function {fn.name}:"):
            return get_metadata(fn, SourceSpan)
    return _class_location(klass)


def _class_location(klass: type) -> SourceSpan | None:
    try:
        _, line = inspect.getsourcelines(klass)
        return SourceSpan(inspect.getsourcefile(klass) or "<unknown>", line, 1)
    except (OSError, TypeError):
        return None


def _levels(mod: Module) -> dict[str, Any]:
    """Topology level name -> declared Topology (or None when only the name is known)."""
    if mod.topologies is not None:
        return {getattr(t, "name", t): t for t in mod.topologies}
    if mod.target is not None:
        return dict.fromkeys(mod.target.topology_levels)
    return {}


def check_mesh_scopes(mod: Module) -> None:
    """hir §1.1: each `with Mesh(topology=...)` names one of the Module's topology levels and
    keeps its extent."""
    levels = _levels(mod)
    for fn in mod.functions:
        for body in [fn.body, *(v.body for v in fn.variants)]:
            if body is None:
                continue
            for node in iter_nodes(body):
                scope = get_metadata(node, MeshScope)
                if scope is not None:
                    _check_scope(mod, fn, levels, scope)


def _check_scope(mod: Module, fn: Function, levels: dict, scope: MeshScope) -> None:
    known = ", ".join(levels) or "none"
    for mesh, span in scope.scopes:
        level = mesh.topology.name
        if level not in levels:
            raise VerifyError(
                f"Function {fn.name}: with Mesh(topology={level!r}) names no topology level of "
                f"Module {mod.name} (levels: {known}); declare it in @module(topologies=...)",
                location=span,
            )
        declared = levels[level]
        count = getattr(declared, "num_devices", None)
        if count is not None and count != mesh.topology.num_devices:
            raise VerifyError(
                f"Function {fn.name}: the mesh scope over {level!r} has "
                f"{mesh.topology.num_devices} units but Module {mod.name} declares {count}; a "
                "mesh scope must not change a level's extent",
                location=span,
            )
