"""One cache policy (issue 24 item 3): every process-wide cache is made by `tilefoundry.caches`,
has a bound, is emptied by `clear_all()`, and an entry keyed by a Function goes when the
Function does."""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import pkgutil
import weakref
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tilefoundry
from tilefoundry.caches import LRU, Memo, clear_all, memoize, registered
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source

SRC = Path(tilefoundry.__file__).parent

REGISTRIES = {
    "_BY_NAME": "every DType by name, filled once as the dtypes are defined",
    "_SURFACE": "the DSL spellings each op module registers",
    "_SURFACES_OF_CLASS": "the same spellings by op class, which the printer names ops by",
    "_KIND_RULES": "the fusion kind rule each op module registers",
    "PALLAS_REF_READERS": "the ops whose Pallas rules read refs, as their modules register",
    "VJP_TAKES_PENDING": "the ops whose VJP rules read a pending cotangent, as they register",
    "_TRANSFORMS": "the Function transforms a DSL body may call, as they register",
    "_LIVE": "the local launches still running (each leaves when it ends)",
    "_JOINED": "the distributed run this process joined (at most one)",
}
"""Module-level containers that are not caches: what they hold is what was registered or is
running, so nothing could be evicted from them."""

_CONTAINERS = ("dict", "OrderedDict", "defaultdict", "set", "list", "WeakKeyDictionary")
_CACHE_DECORATORS = ("cache", "lru_cache")


def _modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(tilefoundry.__path__, "tilefoundry.")
        if not info.name.endswith("__main__")  # runs the command line
    ]


def _is_empty_container(value: ast.expr | None) -> bool:
    """`{}`, `[]`, `dict()`, `OrderedDict()`, ...: what a module fills as it runs (a table
    written out in the source is a constant, not a cache)."""
    if isinstance(value, ast.Dict | ast.List):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    if isinstance(value, ast.Call) and not value.args:
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return name in _CONTAINERS
    return False


def _hand_made_caches(path: Path) -> list[str]:
    """Module-level containers filled at run time and functools cache decorators in one
    source file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and _is_empty_container(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name) and t.id not in REGISTRIES]
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = target.attr if isinstance(target, ast.Attribute) else target.id
                if name in _CACHE_DECORATORS:
                    found.append(f"@{name} {node.name}")
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for p in SRC.rglob("*.py") if p.name != "caches.py"),
    ids=lambda p: str(p.relative_to(SRC)),
)
def test_every_process_wide_cache_is_made_by_the_cache_module(path):
    assert _hand_made_caches(path) == [], (
        f"{path.relative_to(SRC)}: make these with tilefoundry.caches (Memo, LRU, memoize), "
        "or list a registry in REGISTRIES with what it holds"
    )


def test_every_cache_has_a_bound_and_an_eviction_rule():
    for name in _modules():
        importlib.import_module(name)
    caches = registered()
    names = [c.name for c in caches]
    assert len(names) == len(set(names))
    assert len(caches) >= 24  # the caches of issue 24, all through the module
    for cache in caches:
        assert isinstance(cache.bound, int) and cache.bound >= 1, cache.name
        assert len(cache) <= cache.bound, cache.name


def _doubled():
    source = """
from tilefoundry.frontend import Tensor, func


@func
def doubled(x: Tensor[(4,), "f32"]):
    return x + x
"""
    return parse_source(source, "<caches>")["doubled"]


def test_clear_all_empties_every_cache(fresh_caches):
    fn = _doubled()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(evaluate(fn, x), x + x)
    filled = {c.name for c in registered() if len(c)}
    assert {"evaluator: prepared functions", "typeinfer: op rule results"} <= filled
    clear_all()
    assert [c.name for c in registered() if len(c)] == []
    np.testing.assert_array_equal(evaluate(fn, x), x + x)  # refills from nothing


def _holding(ident: int) -> set[str]:
    """The caches with an entry keyed by this id (alone or first in a tuple key)."""
    return {
        c.name
        for c in registered()
        if isinstance(c, dict)
        and any(k == ident or (type(k) is tuple and k and k[0] == ident) for k in c)
    }


def test_a_dropped_function_takes_its_entries_with_it(fresh_caches):
    """A Function-keyed entry holds its Function weakly: dropping the program frees its
    entries, so `id(fn)` in a key never answers for a later object with that id."""
    fn = _doubled()
    x = np.ones(4, np.float32)
    evaluate(fn, x)
    runs_xla = importlib.util.find_spec("jax") is not None
    if runs_xla:
        from tilefoundry.exits.runtimes.xla import run_xla

        np.testing.assert_array_equal(run_xla(fn, x), x + x)
    ident, alive = id(fn), weakref.ref(fn)
    held = {
        "evaluator: prepared functions",
        "evaluator: typed functions",
        "evaluator: static parameter shapes",
    }
    assert _holding(ident) == held | ({"run_xla: executables"} if runs_xla else set())
    del fn
    gc.collect()
    assert alive() is None
    assert _holding(ident) == set()


class _Owner:
    """A stand-in for a Function: something a weak reference can follow."""


_LRU = LRU("test: an LRU of three", 3)
_MEMO = Memo("test: a memo of two", 2)
_OWNED = LRU("test: owned entries", 2)
"""Made once: a cache's name is taken for the process (the refusal test below relies on it)."""


@given(st.lists(st.tuples(st.sampled_from(["put", "hit"]), st.integers(0, 5)), max_size=40))
def test_the_lru_keeps_the_most_recently_used(steps):
    """Against a list ordered least to most recently used: a put or a hit makes a key the most
    recent, and beyond three entries the least recent goes."""
    _LRU.clear()
    model: list[int] = []
    for step, key in steps:
        if step == "put":
            assert _LRU.put(key, -key) == -key
            model = [k for k in model if k != key] + [key]
            model = model[-3:]
        else:
            assert _LRU.hit(key) == (-key if key in model else None)
            if key in model:
                model = [k for k in model if k != key] + [key]
        assert list(_LRU) == model


def test_a_memo_empties_itself_when_full():
    _MEMO.clear()
    _MEMO.put("a", 1)
    _MEMO.put("b", 2)
    _MEMO.put("c", 3)
    assert dict(_MEMO) == {"c": 3}


def test_an_owned_entry_goes_with_its_owner_and_an_evicted_one_forgets_it():
    _OWNED.clear()
    first, second = _Owner(), _Owner()
    _OWNED.put((id(first), "a"), 1, owner=first)
    _OWNED.put((id(first), "b"), 2, owner=first)
    _OWNED.put(id(second), 3, owner=second)  # evicts (first, "a")
    assert list(_OWNED) == [(id(first), "b"), id(second)]
    del first
    gc.collect()
    assert list(_OWNED) == [id(second)]
    _OWNED.put("c", 4)
    _OWNED.put("d", 5)  # evicts second's entry: its weak reference is dropped with it
    del second
    gc.collect()
    assert list(_OWNED) == ["c", "d"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Memo("test: unbounded", 0), "the bound must be a positive int"),
        (lambda: memoize("test: no bound", None)(abs), "the bound must be a positive int"),
        (lambda: LRU("test: an LRU of three", 4), "is made twice"),
    ],
)
def test_a_cache_without_a_bound_or_with_a_taken_name_is_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()
