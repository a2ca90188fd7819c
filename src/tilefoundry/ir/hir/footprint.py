"""Memory a run of a function needs, estimated from its types before any array is allocated.

The evaluator and the exits refuse a program that cannot fit up front, naming the figure, instead
of failing with a MemoryError (or being killed) after allocating for seconds. The estimate is the
bytes of every parameter and every value the body computes, each at its concrete shape: the
reference evaluator keeps every value of an activation alive, so for it this is the peak; for XLA
it is an upper bound. A value on a mesh counts once per device that holds a copy (the simulator
keeps one array per device: a Split shares the value out, a Broadcast or Partial replicates it).

`peak_bytes_per_device` is the finer estimate a schedule gives: the bytes one device holds at
the peak of a run that frees each value after its last reader (a greedy memory-minimising
order, loop bodies one iteration at a time, a called Function's intermediates only while it
runs). It is what reverse mode's choices change: a gradient keeps the forward values its
backward reads alive until then (a loop's stacks, one row per iteration), and a `checkpoint`ed
call keeps only its arguments. It is the one per-device peak: `schedule_peak` gives it with the
values live when it is reached, which `ir/hir/device_memory` reports (`tilefoundry show`,
`run --device-memory`).

The limit is `TILEFOUNDRY_MEMORY_LIMIT` (bytes, or with a K/M/G/T suffix) when set, else the
machine's physical memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from math import prod
from typing import Any, NamedTuple

from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Call, Constant, Expr, Tuple, Var
from tilefoundry.ir.core.graph import iter_nodes, post_order
from tilefoundry.ir.hir.function import Function
from tilefoundry.ir.hir.grid_region import GridRegionExpr
from tilefoundry.ir.hir.walk import callees_first
from tilefoundry.ir.types import TensorType, TupleType, Type, resolve_dim, tensor_fields
from tilefoundry.ir.types.shard import ShardLayout, Split

MEMORY_ENV = "TILEFOUNDRY_MEMORY_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _setting_reader() -> Callable[[], bytes | str | None]:
    """`TILEFOUNDRY_MEMORY_LIMIT` as the process environment holds it now, for the hot paths
    that re-check a cached admission when the setting changed (run_xla's and evaluate's cached
    calls). `os.environ.get` of an unset variable costs about 1.2 µs (two exceptions inside the
    mapping), a few percent of a cached run_xla call; libc's `getenv`, called with the GIL held,
    reads the same environment (every `os.environ` write calls `setenv`/`unsetenv`) in 0.2 µs.
    Where libc cannot be loaded, `os.environ.get`."""
    try:
        import ctypes

        getenv = ctypes.PyDLL(None).getenv
    except Exception:  # no libc to load by that name (Windows): the mapping it is
        return partial(os.environ.get, MEMORY_ENV)
    getenv.restype = ctypes.c_char_p
    getenv.argtypes = (ctypes.c_char_p,)
    return partial(getenv, os.fsencode(MEMORY_ENV))


memory_setting = _setting_reader()
"""`memory_setting()`: the setting's current raw value, None when unset (see `_setting_reader`);
compare two readings for a change, parse with `memory_limit`."""


def _spelled(text: str) -> str:
    return text.strip().upper().removesuffix("B")


def size_bytes(text: str) -> float:
    """Bytes from `80G`, `512M`, `1.5T`, `4096` (binary units; a trailing B is allowed): the one
    size syntax of TILEFOUNDRY_MEMORY_LIMIT and `run --device-memory`; ValueError otherwise."""
    spelled = _spelled(text)
    unit = spelled[-1] if spelled and spelled[-1] in _UNITS else ""
    return float(spelled[: len(spelled) - len(unit)]) * _UNITS[unit]


def memory_limit() -> int | None:
    """The bytes a run may use: the environment's setting, else physical memory (None when
    neither is known, which disables the check)."""
    text = os.environ.get(MEMORY_ENV, "")
    if _spelled(text):
        try:
            return int(size_bytes(text))
        except ValueError:
            raise EvalError(
                f"{MEMORY_ENV}={os.environ[MEMORY_ENV]!r} is not a size; write bytes or a "
                "number with K, M, G or T (e.g. 8G)"
            ) from None
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def value_bytes(type_: Type, bindings: Mapping[Any, int]) -> int:
    """Bytes the values of `type_` occupy at the bound shapes, mesh copies included."""
    return _bytes(type_, bindings, lambda tensor, size: size * _copies(tensor))


def device_bytes(type_: Type, bindings: Mapping[Any, int]) -> int:
    """Bytes one device holds of a value of `type_`: a Split's block, a replicated or plain
    value whole."""
    return _bytes(type_, bindings, lambda tensor, size: size // _split_extent(tensor))


def _bytes(type_: Type, bindings: Mapping[Any, int], held: Callable[[TensorType, int], int]):
    total = 0
    for tensor in tensor_fields(type_) if isinstance(type_, TensorType | TupleType) else ():
        count = 1
        for dim in tensor.shape:
            try:
                count *= dim if isinstance(dim, int) else resolve_dim(dim, bindings)
            except VerifyError:
                return total  # an extent no binding resolves is not counted
        total += held(tensor, (count * tensor.dtype.itemsize_bits + 7) // 8)
    return total


def _extents(layout: ShardLayout) -> list[int]:
    return [e if isinstance(e, int) else 1 for e in layout.mesh.shape]


def _split_extent(tensor: TensorType) -> int:
    """How many blocks a Split shares the value out into (1 for a plain value)."""
    layout = tensor.layout
    if not isinstance(layout, ShardLayout):
        return 1
    pairs = zip(_extents(layout), layout.attrs, strict=True)
    return max(1, prod(e for e, attr in pairs if isinstance(attr, Split)))


def _copies(tensor: TensorType) -> int:
    layout = tensor.layout
    if not isinstance(layout, ShardLayout):
        return 1
    return prod(_extents(layout)) // _split_extent(tensor)


def program_bytes(fn: Any, bindings: Mapping[Any, int]) -> int:
    """The estimate for one run of `fn` (parameters plus every value its body computes)."""
    total = sum(value_bytes(p.type, bindings) for p in fn.params)
    if isinstance(fn.body, Expr):
        params = set(fn.params)
        for node in iter_nodes(fn.body):
            if node not in params:
                total += value_bytes(node.type, bindings)
    return total


class SchedulePeak(NamedTuple):
    """The peak of a run of a Function's body (see `schedule_peak`)."""

    bytes: int
    """The most bytes the body's values hold on one device at once, beyond the parameters."""
    live: tuple[tuple[Expr, int], ...]
    """The values held at that moment, each with its bytes on one device, in the order they
    were computed; the node running then is last, with what it allocates while it runs added
    (a called Function's intermediates, one iteration of a loop's body)."""


def peak_bytes_per_device(fn: Function, bindings: Mapping[Any, int] | None = None) -> int:
    """The bytes one device holds at the peak of a run of `fn` (see the module doc): its
    parameters, plus the most its body's live values reach."""
    bindings = bindings or {}
    return (
        sum(device_bytes(p.type, bindings) for p in fn.params) + schedule_peak(fn, bindings).bytes
    )


def schedule_peak(fn: Function, bindings: Mapping[Any, int] | None = None) -> SchedulePeak:
    """The peak of `fn`'s body under the schedule (see `_Schedule`), and what is live then: the
    one figure `peak_bytes_per_device` adds to the parameters and the device-memory report
    breaks down."""
    bindings = bindings or {}
    peaks: dict[Function, int] = {}
    found = SchedulePeak(0, ())
    for callee in callees_first(fn):  # callees first: a call's peak is known when it is reached
        if isinstance(callee.body, Expr):
            schedule = _Schedule(bindings, peaks)
            if callee is fn:
                found = schedule.peak_and_live((fn.body,), set(fn.params))
            else:
                peaks[callee] = schedule.peak((callee.body,), set(callee.params))
    return found


class _Schedule:
    """The live bytes of a region run in the order a memory-minimising list scheduler picks:
    of the nodes whose operands are computed, one that frees at least what it allocates first
    (a weight gradient that contracts the activations it frees), else the one with the longest
    way still to go to the result (the forward before the backward, and a checkpointed call's
    recompute where its cotangent arrives, not up front); each value is freed after its last
    reader. A Tuple or a tuple field copies nothing: it holds its operands alive until it is
    freed itself."""

    def __init__(self, bindings: Mapping[Any, int], peaks: Mapping[Function, int]):
        self.bindings = bindings
        self.peaks = peaks

    def peak(self, roots: tuple[Expr, ...], outside: set[Expr]) -> int:
        """The most bytes the region under `roots` allocates at once beyond the `outside` values
        (live already: parameters, a loop's variables and the outer values its body reads)."""
        return self._run(roots, outside, record=False).bytes

    def peak_and_live(self, roots: tuple[Expr, ...], outside: set[Expr]) -> SchedulePeak:
        """`peak`, with the values live when it is reached."""
        return self._run(roots, outside, record=True)

    def _run(self, roots: tuple[Expr, ...], outside: set[Expr], record: bool) -> SchedulePeak:
        def reads(node: Expr) -> tuple[Expr, ...]:
            return () if node in outside else tuple(dict.fromkeys(self._reads(node)))

        nodes = list(dict.fromkeys(n for root in roots for n in iter_nodes(root, edges=reads)))
        own = {n: 0 if n in outside or _aliases(n) else self._size(n) for n in nodes}
        holders = dict.fromkeys(nodes, 0)  # per node: readers (and roots) not done with it
        waiting = {n: len(reads(n)) for n in nodes}  # per node: operands not run yet
        readers: dict[Expr, list[Expr]] = {n: [] for n in nodes}
        for node in nodes:
            for operand in reads(node):
                holders[operand] += 1
                readers[operand].append(node)
        for root in dict.fromkeys(roots):
            holders[root] += 1
        rank = {node: index for index, node in enumerate(nodes)}
        ahead = _steps_to_roots(nodes, reads)
        held: dict[Expr, int] = {}  # the values allocated now (kept only when recording)

        def freeable(values: tuple[Expr, ...]) -> int:
            """The bytes dropping the last hold on `values` frees (through aliases, as
            `release` does)."""
            return sum(
                own[v] + (freeable(reads(v)) if _aliases(v) else 0)
                for v in values
                if holders[v] == 1
            )

        def priority(node: Expr) -> tuple[bool, int, int, int]:
            grown = own[node] - (0 if _aliases(node) else freeable(reads(node)))
            return grown > 0, -ahead[node], grown, rank[node]

        def release(values: tuple[Expr, ...]) -> int:
            """Drop one hold on each of `values`: the bytes that frees."""
            freed, stack = 0, list(values)
            while stack:
                value = stack.pop()
                holders[value] -= 1
                if holders[value] == 0:
                    freed += own[value]
                    held.pop(value, None)
                    if _aliases(value):
                        stack.extend(reads(value))
            return freed

        ready = [n for n in nodes if waiting[n] == 0]
        live = peak = 0
        at_peak: tuple[tuple[Expr, int], ...] = ()
        while ready:
            node = min(ready, key=priority)
            ready.remove(node)
            running = own[node] + self._transient(node)
            if live + running > peak:
                peak = live + running
                if record:
                    at_peak = (*held.items(), (node, running))
            live += own[node]
            if record and own[node]:
                held[node] = own[node]
            if not _aliases(node):
                live -= release(reads(node))
            for reader in readers[node]:
                waiting[reader] -= 1
                if waiting[reader] == 0:
                    ready.append(reader)
        return SchedulePeak(peak, at_peak)

    def _size(self, node: Expr) -> int:
        return device_bytes(node.type, self.bindings)

    def _reads(self, node: Expr) -> tuple[Expr, ...]:
        if isinstance(node, GridRegionExpr):
            return (*node.init_args, *_loop_inputs(node)[1])
        return node.block_operands()

    def _transient(self, node: Expr) -> int:
        """What `node` allocates while it runs beyond its own value: one iteration of a loop's
        body, a called Function's intermediates."""
        if isinstance(node, GridRegionExpr):
            local, inputs = _loop_inputs(node)
            return self.peak(tuple(node.yield_values), {*local, *inputs})
        if isinstance(node, Call) and isinstance(node.target, Function):
            return max(0, self.peaks.get(node.target, 0) - self._size(node))
        return 0


def _steps_to_roots(nodes, reads) -> dict[Expr, int]:
    """The longest chain of readers from each node to a root of its region: a node's readers
    come before it in the reversed post-order, so each count is final when it is read."""
    steps = dict.fromkeys(nodes, 0)
    for node in reversed(post_order(nodes, edges=reads)):
        for operand in reads(node):
            steps[operand] = max(steps[operand], steps[node] + 1)
    return steps


def _aliases(node: Expr) -> bool:
    """A Tuple, a field of a tuple (TupleGetItem, the one op that reads one field of a tuple
    whole, a tensor or a nested tuple) or a tuple passed through whole (OptimizationBarrier,
    whose result has its operand's type); told from the types, as engines do not import op
    modules: it copies nothing."""
    if isinstance(node, Tuple):
        return True
    if not isinstance(node, Call) or isinstance(node.target, Function) or len(node.args) != 1:
        return False
    held = node.args[0].type
    return isinstance(held, TupleType) and (node.type == held or node.type in held.fields)


def _loop_inputs(loop: GridRegionExpr) -> tuple[frozenset[Expr], tuple[Expr, ...]]:
    """(the loop's variables and those of the loops in its body, the outer values its body
    reads): a body value that reads no loop variable is computed once, before the loop."""
    nodes = list(dict.fromkeys(n for y in loop.yield_values for n in iter_nodes(y)))
    local = {v for n in (loop, *nodes) if isinstance(n, GridRegionExpr) for v in _variables(n)}
    readers: dict[Expr, list[Expr]] = {}
    for node in nodes:
        for operand in node.operands():
            readers.setdefault(operand, []).append(node)
    inner, stack = set(local), list(local)
    while stack:  # everything that reads a loop variable, directly or through other values
        for reader in readers.get(stack.pop(), ()):
            if reader not in inner:
                inner.add(reader)
                stack.append(reader)
    read = (o for n in nodes if n in inner for o in n.operands())
    inputs = dict.fromkeys(
        o for o in (*read, *loop.yield_values) if o not in inner and not isinstance(o, Constant)
    )
    return frozenset(local), tuple(inputs)


def _variables(loop: GridRegionExpr) -> tuple[Var, ...]:
    return (loop.induction_var, *loop.carried_args)


def size_text(count: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if count >= _UNITS[unit]:
            return f"{count / _UNITS[unit]:.1f} {unit}iB"
    return f"{count} bytes"


def check_memory(fn: Any, bindings: Mapping[Any, int], caller: str) -> None:
    """Refuse a run that cannot fit in the memory limit, before anything is allocated."""
    limit = memory_limit()
    if limit is None:
        return
    needed = program_bytes(fn, bindings)
    if needed > limit:
        source = MEMORY_ENV if os.environ.get(MEMORY_ENV) else "this machine's memory"
        raise EvalError(
            f"{caller}: Function {fn.name} needs about {size_text(needed)} for its values at "
            f"these shapes, more than the {size_text(limit)} limit ({source}); use smaller "
            f"shapes, or set {MEMORY_ENV} (e.g. {MEMORY_ENV}=64G) to raise the limit"
        )
