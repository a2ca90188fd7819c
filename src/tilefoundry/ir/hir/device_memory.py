"""Memory per device of one run of a Function (a training step), from its types, before the run.

The report of `ir/hir/footprint`'s schedule peak (`schedule_peak`, the figure remat's saving is
measured with), broken down for the reader who must make it fit:

- the arguments: each parameter's block on one device (a Split divides its extent, a Broadcast
  or Partial keeps it whole) — for a training step, its parameters, optimizer state and batch;
- the peak of the values the body computes, live at once under that schedule (a greedy
  memory-minimising order, each value freed after its last reader, a called Function's
  intermediates only while it runs, loop bodies one iteration at a time, tuples aliasing what
  they hold), and the values live when it is reached, largest first. For a training step the
  forward's activations the backward reads, the gradients and the updated state are among them.

`total` is `footprint.peak_bytes_per_device`. It is an estimate of an unfused schedule: XLA fuses
elementwise chains (their intermediates never exist), reuses buffers, and with donation writes
results into the arguments' buffers, so its own `memory_analysis()` of the compiled step reports
the same argument bytes and fewer temporary bytes (tests/train/test_device_memory.py states the
agreement).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tilefoundry.ir.core import Call, Expr
from tilefoundry.ir.hir.footprint import device_bytes, schedule_peak, size_bytes, size_text
from tilefoundry.ir.hir.function import Function
from tilefoundry.ir.hir.grid_region import GridRegionExpr


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device needs for a run, and who needs them."""

    arguments: tuple[tuple[str, int], ...]
    """(parameter name, bytes of its block on one device), in signature order."""
    peak_values: int
    """The most bytes of computed values live at once under the schedule (callees' peaks
    included)."""
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


def parse_size(text: str) -> int:
    """A positive, finite `footprint.size_bytes` (`80G`, `512M`, `1.5T`, `4096`)."""
    try:
        value = size_bytes(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"expected a size such as 80G, 512M or 4096, got {text!r}")
    return int(value)


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
    peak = schedule_peak(fn, bindings)
    named = ((_name(node, size, bindings or {}), size) for node, size in peak.live)
    live = sorted(named, key=lambda item: -item[1])
    return DeviceMemory(arguments, peak.bytes, tuple(live[:5]))


def _name(node: Expr, size: int, bindings: Mapping[Any, int]) -> str:
    """What a value live at the peak is, for a reader choosing what to shard: the node running
    then, when it allocates more than its own value, by where that happens."""
    if isinstance(node, GridRegionExpr):
        return "a loop, one iteration of its body"
    if isinstance(node, Call):
        target = getattr(node.target, "name", type(node.target).__name__)
        if isinstance(node.target, Function) and size > device_bytes(node.type, bindings):
            return f"inside {target}"
        shape = getattr(node.type, "shape", None)
        return f"{target} result" + (f" {tuple(shape)}" if shape is not None else "s")
    return type(node).__name__
