"""Module and Target: the execution domain that owns functions.

A Function never declares where it runs; the Module that owns it does (hir §1.1), and entering a
Module is the moment authoring ends: constructing one seals its functions, so a dispatch base can
no longer grow variants and its hash becomes stable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tilefoundry.errors import VerifyError
from tilefoundry.ir.names import check_name


@dataclass(frozen=True)
class Target:
    """A compilation target and the ordered topology levels it offers."""

    name: str
    topology_levels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise VerifyError(f"Target: name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "topology_levels", tuple(self.topology_levels))


def _level_name(topology: Any) -> str:
    return topology if isinstance(topology, str) else getattr(topology, "name", repr(topology))


class Module:
    """A named set of top-level functions with the Target and Topology hierarchy they run on.

    Sealing happens here because a sealed Module is the point where every seed invariant on a
    function must hold: no top-level variant, no uncallable base (no body and no variants), and a
    dispatch base whose variants partition its envelope.
    """

    __slots__ = ("functions", "name", "target", "topologies")

    def __init__(
        self,
        name: str,
        functions: Iterable[Any],
        target: Target | None = None,
        topologies: Iterable[Any] | None = None,
    ):
        check_name("Module", name)
        if target is not None and not isinstance(target, Target):
            raise VerifyError(f"Module {name}: target must be a Target, got {target!r}")
        functions = tuple(functions)
        seen: set[str] = set()
        for fn in functions:
            if not hasattr(fn, "seal"):
                raise VerifyError(f"Module {name}: {fn!r} is not a Function")
            if fn.specializations:
                raise VerifyError(
                    f"Module {name}: function '{fn.name}' is a variant "
                    f"(specializations {fn.specializations}); register it on its base instead"
                )
            if fn.name in seen:
                raise VerifyError(f"Module {name}: two functions are named '{fn.name}'")
            seen.add(fn.name)
        if topologies is not None:
            topologies = tuple(topologies)
            levels = [_level_name(t) for t in topologies]
            if len(set(levels)) != len(levels):
                raise VerifyError(f"Module {name}: topology levels {levels} repeat a level")
        for fn in functions:
            fn.seal()
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "functions", functions)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "topologies", topologies)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Module is immutable")

    def lookup(self, name: str) -> Any:
        for fn in self.functions:
            if fn.name == name:
                return fn
        names = ", ".join(fn.name for fn in self.functions) or "none"
        raise VerifyError(f"Module {self.name}: no function '{name}'; functions: {names}")

    def __getitem__(self, name: str) -> Any:
        return self.lookup(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self.lookup(name)
        except VerifyError as err:
            raise AttributeError(err.message) from None

    def __repr__(self) -> str:
        return f"Module({self.name!r}, {[fn.name for fn in self.functions]})"
