"""Every process-wide cache of tilefoundry is made here, so each has a name, a bound and an
eviction rule, and `clear_all()` empties them all.

A cache that grows with every program ever compiled is a leak in a long-lived process (a notebook,
a server re-parsing programs), and a cache keyed by `id(fn)` that outlives `fn` answers for
whatever object later reuses that id. Hence three makers, one rule each:

- `Memo(name, bound)`: results of a pure computation, emptied at once when full. Refilling is
  cheap, and the hit path stays a plain `dict.get` (typeinfer looks one up per node).
- `LRU(name, bound)`: entries costly to rebuild (compiled executables, traced kernels); the
  least recently used is dropped first, and a hit (`hit`) makes an entry the most recent.
- `memoize(name, bound)`: `functools.lru_cache` of a pure function of hashable arguments.

`Memo.put` and `LRU.put` take an `owner`: the Function an entry belongs to, held by a weak
reference whose collection drops the entry. A key built from `id(fn)` must be put with
`owner=fn`: then a dropped program frees its entries, and no entry outlives the object whose id
keys it. (A value that itself refers to its Function keeps it alive until the bound evicts it.)
"""

from __future__ import annotations

import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

__all__ = ["LRU", "Cache", "Memo", "clear_all", "memoize", "registered"]


class Cache(Protocol):
    """What the registry knows of each cache."""

    name: str
    bound: int

    def clear(self) -> None: ...

    def __len__(self) -> int: ...


_REGISTRY: dict[str, Cache] = {}


def _register(cache: Cache) -> None:
    if not isinstance(cache.bound, int) or cache.bound < 1:
        raise ValueError(f"cache {cache.name!r}: the bound must be a positive int")
    if cache.name in _REGISTRY:
        raise ValueError(f"cache {cache.name!r} is made twice")
    _REGISTRY[cache.name] = cache


def registered() -> tuple[Cache, ...]:
    """Every cache made so far (a module's caches exist once it is imported)."""
    return tuple(_REGISTRY.values())


def clear_all() -> None:
    """Empty every cache: the process then computes everything afresh, as a new one would."""
    for cache in _REGISTRY.values():
        cache.clear()


class _Owners:
    """Which keys of one cache each live owner holds, and the weak references that drop them.
    (A weak reference's callback may run at any allocation, so every step tolerates another
    owner's entries vanishing meanwhile.)"""

    def __init__(self, entries: dict) -> None:
        self._entries = entries
        self._keys: dict[int, tuple[weakref.ref, set]] = {}
        self._owner_of: dict[Hashable, int] = {}

    def own(self, owner: Any, key: Hashable) -> None:
        ident = id(owner)
        held = self._keys.get(ident)
        if held is None or held[0]() is not owner:
            self._drop(ident)
            held = (weakref.ref(owner, lambda ref: self._collected(ident, ref)), set())
            self._keys[ident] = held
        held[1].add(key)
        self._owner_of[key] = ident

    def _collected(self, ident: int, ref: weakref.ref) -> None:
        held = self._keys.get(ident)
        if held is not None and held[0] is ref:
            self._drop(ident)

    def _drop(self, ident: int) -> None:
        """The owner that had this id is gone: so are its entries."""
        held = self._keys.pop(ident, None)
        for key in held[1] if held is not None else ():
            self._entries.pop(key, None)
            self._owner_of.pop(key, None)

    def forget(self, key: Hashable) -> None:
        """`key` left the cache (evicted or replaced)."""
        ident = self._owner_of.pop(key, None)
        held = self._keys.get(ident) if ident is not None else None
        if held is not None:
            held[1].discard(key)
            if not held[1]:
                self._keys.pop(ident, None)

    def clear(self) -> None:
        self._keys.clear()
        self._owner_of.clear()


class _Entries:
    """What Memo and LRU share: a name and a bound in the registry, and the owners of their
    entries. (Slots keep a look-up of `get` or `move_to_end` as fast as on a plain dict: without
    them every method look-up also searches an instance `__dict__`.)"""

    __slots__ = ()

    def __init__(self, name: str, bound: int) -> None:
        super().__init__()
        self.name, self.bound = name, bound
        self._owners = _Owners(self)
        _register(self)

    def clear(self) -> None:
        super().clear()
        self._owners.clear()


class Memo(_Entries, dict):
    """A dict of pure results that empties itself when it reaches `bound` entries; read it with
    `get` (or `in` and `[]`), fill it with `put`."""

    __slots__ = ("_owners", "bound", "name")

    def put(self, key: Hashable, value: Any, owner: Any = None) -> Any:
        """Store and return `value`; with `owner`, the entry goes when `owner` is collected."""
        if len(self) >= self.bound:
            self.clear()
        self._owners.forget(key)
        self[key] = value
        if owner is not None:
            self._owners.own(owner, key)
        return value


class LRU(_Entries, OrderedDict):
    """At most `bound` entries, the least recently used dropped first. `hit(key)` reads an entry
    and makes it the most recent (a hot path may spell that `self[key]`, `move_to_end(key)`)."""

    __slots__ = ("_owners", "bound", "name")

    def hit(self, key: Hashable, default: Any = None) -> Any:
        try:
            value = self[key]
        except KeyError:
            return default
        self.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any, owner: Any = None) -> Any:
        """Store `value` as the most recent entry and return it, dropping the least recent ones
        beyond the bound; with `owner`, the entry goes when `owner` is collected."""
        self._owners.forget(key)
        self[key] = value
        self.move_to_end(key)
        if owner is not None:
            self._owners.own(owner, key)
        while len(self) > self.bound:
            oldest, _ = self.popitem(last=False)
            self._owners.forget(oldest)
        return value


class _Memoized:
    """The registry's view of one `memoize`d function."""

    def __init__(self, name: str, function: Any) -> None:
        self.name, self.bound = name, function.cache_info().maxsize
        self._function = function
        _register(self)

    def clear(self) -> None:
        self._function.cache_clear()

    def __len__(self) -> int:
        return self._function.cache_info().currsize


def memoize(name: str, bound: int) -> Callable[[Callable], Callable]:
    """`functools.lru_cache(maxsize=bound)`, registered under `name`."""

    def decorate(function: Callable) -> Callable:
        memoized = functools.lru_cache(maxsize=bound)(function)
        _Memoized(name, memoized)
        return memoized

    return decorate
