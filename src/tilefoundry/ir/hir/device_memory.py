"""Memory per device of one run of a Function (a training step), from its types, before the run.

Where `ir/hir/footprint` bounds what the *simulator* holds (every value of the body alive, one
copy per device that holds it), this is what one *device* needs when the program runs in order:

- the arguments: each parameter's block on one device (a Split divides its extent, a Broadcast
  or Partial keeps it whole) — for a training step, its parameters, optimizer state and batch;
- the peak of the values the body computes, live at once: the body is run in operand order
  (post-order), a value is allocated when computed and freed after its last reader; a call of a
  Function adds its callee's own peak while it runs; tuples and their fields alias what they
  hold. For a training step the forward's activations the backward reads, the gradients and
  the updated state are all among these values, live where the schedule has them live.

It is an estimate of an unfused schedule: XLA fuses elementwise chains (their intermediates
never exist), reuses buffers, and with donation writes results into the arguments' buffers, so
its own `memory_analysis()` of the compiled step reports the same argument bytes and fewer
temporary bytes (tests/train/test_device_memory.py states the agreement).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilefoundry.ir.core import Call, Expr, Tuple, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir.footprint import device_bytes, size_text
from tilefoundry.ir.types import TupleType


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device needs for a run, and who needs them."""

    arguments: tuple[tuple[str, int], ...]
    """(parameter name, bytes of its block on one device), in signature order."""
    peak_values: int
    """The most bytes of computed values live at once (callees' peaks included)."""
    live_at_peak: tuple[tuple[str, int], ...]
    """The values live at that moment, largest first: (what it is, bytes)."""

    @property
    def argument_bytes(self) -> int:
        return sum(b for _, b in self.arguments)

    @property
    def total(self) -> int:
        return self.argument_bytes + self.peak_values

    def largest(self, count: int = 3) -> list[tuple[str, int]]:
        """The largest contributors: arguments and values live at the peak, largest first."""
        both = [*self.arguments, *self.live_at_peak]
        return sorted(both, key=lambda item: -item[1])[:count]

    def describe(self) -> str:
        top = ", ".join(f"{name} {size_text(size)}" for name, size in self.largest())
        return (
            f"{size_text(self.total)} per device: arguments {size_text(self.argument_bytes)}, "
            f"peak of computed values {size_text(self.peak_values)} (largest: {top})"
        )


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int:
    """Bytes from `80G`, `512M`, `1.5T`, `4096` (binary units; a trailing B is allowed)."""
    spelled = text.strip().upper().removesuffix("B")
    unit = spelled[-1] if spelled and spelled[-1] in _UNITS else ""
    try:
        value = float(spelled[: len(spelled) - len(unit)])
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"expected a size such as 80G, 512M or 4096, got {text!r}")
    return int(value * _UNITS[unit])


def check_device_memory(fn: Any, bindings: Mapping[Any, int] | None, budget: int, caller: str):
    """Refuse, before the run, a step whose estimate per device is over `budget` bytes, naming
    its largest contributors."""
    from tilefoundry.errors import EvalError

    memory = device_memory(fn, bindings)
    if memory.total > budget:
        raise EvalError(
            f"{caller}: Function {fn.name} needs about {memory.describe()}, more than the "
            f"{size_text(budget)} per device of --device-memory; shard the largest over more "
            "devices (a Split divides a value's bytes per device, ZeRO-1 the optimizer state's), "
            "use smaller shapes, or raise the budget"
        )
    return memory


def device_memory(fn: Any, bindings: Mapping[Any, int] | None = None) -> DeviceMemory:
    """The per-device estimate of one run of `fn` at these DimVar bindings."""
    arguments = tuple((p.name, device_bytes(p.type, bindings or {})) for p in fn.params)
    peak, live = _peak(fn, bindings or {}, {})
    return DeviceMemory(arguments, peak, live)


def _peak(fn: Any, bindings: Mapping[Any, int], memo: dict) -> tuple[int, tuple]:
    """(peak bytes of computed values, what is live then) for `fn`'s body, memoised per
    callee."""
    if fn in memo:
        return memo[fn]
    memo[fn] = (0, ())  # a recursive call adds nothing more while it is being measured
    if fn.body is None:
        return memo[fn]
    order = post_order([fn.body])
    position = {node: i for i, node in enumerate(order)}
    last_use = {node: position[node] for node in order}
    last_use[fn.body] = len(order)  # the result lives to the end
    for node in reversed(order):  # readers first: an alias keeps what it holds alive
        for operand in node.operands():
            held = last_use[node] if _aliases(node) else position[node]
            last_use[operand] = max(last_use[operand], held)
    frees: dict[int, list[Expr]] = {}
    for node, index in last_use.items():
        frees.setdefault(index, []).append(node)
    live: dict[Expr, int] = {}
    peak, at_peak = 0, ()
    for index, node in enumerate(order):
        size = 0 if _aliases(node) or isinstance(node, Var) else device_bytes(node.type, bindings)
        inner = 0  # a callee's peak includes its result: the call needs the larger of the two
        if isinstance(node, Call) and hasattr(node.target, "params"):
            inner, _ = _peak(node.target, bindings, memo)
        now = sum(live.values()) + max(size, inner)
        live[node] = size
        if now > peak:
            peak = now
            held = [(_name(n), b) for n, b in live.items() if b and (n is not node or not inner)]
            if inner:
                held.append((f"inside {node.target.name}", max(size, inner)))
            at_peak = tuple(sorted(held, key=lambda t: -t[1])[:5])
        for done in frees.get(index, ()):
            live.pop(done, None)
    memo[fn] = (peak, at_peak)
    return memo[fn]


def _aliases(node: Expr) -> bool:
    """Nodes that hold other values rather than new storage: a tuple, and a call that reads
    one field of a tuple whole (TupleGetItem; read from the types, as engines do not import
    op modules)."""
    if isinstance(node, Tuple):
        return True
    if not isinstance(node, Call) or len(node.args) != 1:
        return False
    held = node.args[0].type
    return isinstance(held, TupleType) and any(node.type == f for f in held.fields)


def _name(node: Expr) -> str:
    if isinstance(node, Call):
        target = getattr(node.target, "name", type(node.target).__name__)
        shape = getattr(node.type, "shape", None)
        return f"{target} result" + (f" {tuple(shape)}" if shape is not None else "s")
    return type(node).__name__
