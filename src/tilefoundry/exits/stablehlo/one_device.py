"""The StableHLO exit: HIR functions as version-pinned StableHLO text (SFEP-0053 §3.7).

The emitter is pure Python text generation and imports no jax (DESIGN §5); jaxlib only validates
and serialises its output (`tilefoundry.exits.stablehlo.jaxlib_tools`). Each op's lowering lives in
the op's own module, registered with `register_stablehlo`; this engine walks the DAG, names SSA
values, lowers functions, calls and loops, and asks the registry for everything else. What it cannot
express it refuses with UnsupportedError naming the op (never a custom_call).

Shapes must be concrete: a DimVar function is emitted per call shape, `bindings` mapping each
DimVar to its extent (run_xla derives them from the arguments); a dispatch prototype is emitted as
the variant those bindings select.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.stablehlo.loops import (
    loop_bounds,
    loop_captures,
    while_condition,
    while_text,
)
from tilefoundry.exits.stablehlo.module_header import (
    STABLEHLO_TARGET_VERSION,
    VERSION_ATTRIBUTE,
    module_name,
)
from tilefoundry.gc_pause import gc_paused
from tilefoundry.ir.core import Call, Constant, Expr, Module, Op, Tuple, Var, source_span
from tilefoundry.ir.core.graph import BLOCK_OPERANDS, post_order
from tilefoundry.ir.core.nested import flatten, regroup
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr, select_variant
from tilefoundry.ir.hir.facts import LoopReads, device_meshes, loop_invariants
from tilefoundry.ir.lowering.builder import Lowered, Lowering
from tilefoundry.ir.lowering.mlir_text import (
    check_logical_layout,
    dense_literal,
    flat_types,
    mlir_symbol,
)
from tilefoundry.ir.lowering.replay import lower_cached
from tilefoundry.ir.types import TensorType, TupleType, i64
from tilefoundry.rules import STABLEHLO


class _FunctionEmitter:
    """Lowers one Function body; callees are queued on the module emitter."""

    def __init__(self, module: _ModuleEmitter, lowering: Lowering):
        self.module = module
        self.lw = lowering
        self.values: dict[Expr, Lowered] = {}
        self.reads = LoopReads()

    def lower(self, root: Expr) -> Lowered:
        values = self.values
        for node in post_order((root,), BLOCK_OPERANDS, done=values):
            if node in values:  # a loop lowers its invariants before itself
                continue
            try:
                if isinstance(node, GridRegionExpr):
                    values[node] = self.lower_loop(node)
                else:
                    values[node] = self.lower_node(node)
            except UnsupportedError as err:  # the innermost located node locates the refusal
                raise err.with_location(source_span(node)) from None
        return values[root]

    def lower_node(self, node: Expr) -> Lowered:
        if isinstance(node, Var):
            raise UnsupportedError(f"StableHLO exit: Var '{node.name}' is used outside its scope")
        if isinstance(node, Constant):
            return self.lower_constant(node)
        if isinstance(node, Tuple):
            return tuple(self.values[e] for e in node.elements)
        if isinstance(node, Call) and isinstance(node.target, Function):
            return self.lower_call(node)
        if isinstance(node, Call) and isinstance(node.target, Op):
            return self.lower_op(node)
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            return self.lower_fusion(node)
        rule = STABLEHLO.lookup(type(node))  # e.g. FusionRegion registers its own lowering
        return rule(node, self)

    def lower_constant(self, node: Constant) -> str:
        type_ = node.type
        check_logical_layout(type_, "a constant")
        text = dense_literal(node.value, type_.dtype)
        return self.lw.op(f"stablehlo.constant {text} : {self.lw.type(type_)}")

    def lower_op(self, call: Call) -> Lowered:
        op = call.target
        arg_types = tuple(a.type for a in call.args)
        for i, t in enumerate(arg_types):
            if isinstance(t, TensorType):
                check_logical_layout(t, f"{type(op).__name__} operand {i}")
        if isinstance(call.type, TensorType):
            check_logical_layout(call.type, f"the result of {type(op).__name__}")
        rule = STABLEHLO.lookup(type(op))
        operands = tuple(self.values[a] for a in call.args)
        return lower_cached(rule, op, operands, arg_types, call.type, self.lw, call)

    def lower_call(self, call: Call) -> Lowered:
        symbol = self.module.symbol_for(call.target, self.lw.bindings)
        args = [name for a in call.args for name in flatten(self.values[a])]
        arg_types = [t for a in call.args for t in flat_types(a.type, self.lw.bindings)]
        results = flat_types(call.type, self.lw.bindings)
        signature = f"({', '.join(arg_types)}) -> ({', '.join(results)})"
        names = self.lw.op(f"func.call @{symbol}({', '.join(args)}) : {signature}", len(results))
        return regroup(iter(flatten(names)), call.type)

    def lower_fusion(self, call: Call) -> Lowered:
        """A region is emitted inline: its body lowers into this function's SSA namespace with the
        region inputs bound to the argument names (downstream XLA re-fuses as it likes)."""
        region = call.target
        inner = _FunctionEmitter(self.module, self.lw)
        for var, arg in zip(region.inputs, call.args, strict=True):
            inner.values[var] = self.values[arg]
        results = tuple(inner.lower(output) for output in region.outputs)
        return results[0] if len(results) == 1 else results

    def lower_loop(self, loop: GridRegionExpr) -> Lowered:
        """`stablehlo.while` over (induction, carries..., captures...): every outer value the body
        reads is threaded through as an unchanged carry, so the regions capture nothing."""
        lw = self.lw
        for node in loop_invariants(loop, self.reads, self.values):
            self.lower(node)
        captures = sorted(
            ((c, self.values[c]) for c in loop_captures(loop, self.values)),
            key=lambda item: flatten(item[1]),
        )
        start, stop, step_size = loop_bounds(loop, lw.bindings)
        index_type = lw.type(TensorType((), i64))
        first = lw.constant(start, i64)
        carries = [self.values[i] for i in loop.init_args]
        init_names = [first, *(n for c in carries for n in flatten(c)), *(n for _, n in captures)]
        types = [index_type]
        types += [t for phi in loop.carried_args for t in flat_types(phi.type, lw.bindings)]
        types += [t for c, _ in captures for t in flat_types(c.type, lw.bindings)]
        block_args = [lw.fresh() for _ in types]
        cond_lines = while_condition(lw, block_args[0], stop)

        body_lw = lw.child(4)
        inner = _FunctionEmitter(self.module, body_lw)
        names = iter(block_args[1:])
        inner.values[loop.induction_var] = block_args[0]
        for phi in loop.carried_args:
            inner.values[phi] = regroup(names, phi.type)
        for expr, _ in captures:
            inner.values[expr] = regroup(names, expr.type)
        inner.lower(loop.body)
        yields = [n for y in loop.yield_values for n in flatten(inner.lower(y))]
        step = body_lw.constant(step_size, i64)
        following = body_lw.op(f"stablehlo.add {block_args[0]}, {step} : {index_type}")
        returned = [following, *yields, *(block_args[len(block_args) - len(captures) :])]
        body_lw.line(f'"stablehlo.return"({", ".join(returned)}) : ({", ".join(types)}) -> ()')

        results = flatten(while_text(lw, init_names, types, block_args, cond_lines, body_lw.lines))
        carried = results[1 : len(results) - len(captures)]
        if not loop.carried_args:
            return ()
        if len(loop.carried_args) == 1:
            return regroup(iter(carried), loop.carried_args[0].type)
        return regroup(iter(carried), TupleType(tuple(p.type for p in loop.carried_args)))


class _ModuleEmitter:
    """Collects the functions of one module: entries first, then callees in first-call order."""

    def __init__(self) -> None:
        self.symbols: dict[tuple[int, Any], str] = {}
        self.queue: list[tuple[Function, Mapping[Any, int] | None, str]] = []
        self.taken: set[str] = set()

    def symbol_for(self, fn: Function, bindings: Mapping[Any, int] | None) -> str:
        key = (id(fn), tuple(sorted((str(k), v) for k, v in (bindings or {}).items())))
        if key not in self.symbols:
            base = mlir_symbol(fn.name, "fn")
            symbol, suffix = base, 1
            while symbol in self.taken or symbol == "main":
                symbol, suffix = f"{base}_{suffix}", suffix + 1
            self.taken.add(symbol)
            self.symbols[key] = symbol
            self.queue.append((fn, bindings, symbol))
        return self.symbols[key]

    def emit_function(self, fn: Function, bindings, symbol: str, visibility: str) -> list[str]:
        if fn.body is None:
            fn = select_variant(fn, bindings=dict(bindings or {}))
        for p in fn.params:
            if isinstance(p.type, TensorType):
                check_logical_layout(p.type, f"parameter '{p.name}' of {fn.name}")
        lw = Lowering(bindings, [0], indent=4)
        emitter = _FunctionEmitter(self, lw)
        params = []
        for i, p in enumerate(fn.params):
            types = flat_types(p.type, bindings)
            names = [f"%arg{i}_{k}" if len(types) > 1 else f"%arg{i}" for k in range(len(types))]
            emitter.values[p] = regroup(iter(names), p.type)
            params += [f"{n}: {t}" for n, t in zip(names, types, strict=True)]
        result = flatten(emitter.lower(fn.body))
        result_types = flat_types(fn.body.type, bindings)
        lw.line(f"return {', '.join(result)} : {', '.join(result_types)}")
        signature = f"({', '.join(params)}) -> ({', '.join(result_types)})"
        head = f"  func.func {visibility} @{symbol}{signature} {{"
        return [head, *lw.lines, "  }"]

    def emit(self, entries: list[tuple[Function, str]], bindings, name: str) -> str:
        for _, symbol in entries:
            self.taken.add(symbol)
        lines = [
            f'module @{name} attributes {{{VERSION_ATTRIBUTE} = "{STABLEHLO_TARGET_VERSION}"}} {{'
        ]
        for fn, symbol in entries:
            lines += self.emit_function(fn, bindings, symbol, "public")
        done = 0
        while done < len(self.queue):
            fn, fn_bindings, symbol = self.queue[done]
            lines += self.emit_function(fn, fn_bindings, symbol, "private")
            done += 1
        return "\n".join([*lines, "}"]) + "\n"


@gc_paused
def emit_stablehlo(
    obj: Function | Module,
    *,
    bindings: Mapping[Any, int] | None = None,
    portable: bool = False,
) -> str | bytes:
    """StableHLO text for a Function (as `@main`) or a Module (each function public under its own
    name); `portable=True` returns the VHLO portable artifact at STABLEHLO_TARGET_VERSION.

    One emitter for both exits (DESIGN §3): a Function with sharded values is a program on a
    device mesh, and gets the SPMD module (`exits.stablehlo.spmd`: Shardy mesh, manual computation,
    explicit collectives; a warp/thread mesh is refused there); an unsharded one, or one whose
    meshes are all cta grids of one device (`mesh_is_on_one_device`), the single-device module.
    """
    emitter = _ModuleEmitter()
    sharded = isinstance(obj, Function) and on_a_device_mesh(obj, bindings)
    if isinstance(obj, Module):
        entries = _entry_symbols(obj.functions)
        text = emitter.emit(entries, bindings, module_name(obj.name))
    elif sharded:
        from tilefoundry.exits.stablehlo.spmd import emit_spmd

        text = emit_spmd(obj, bindings=bindings)
    elif isinstance(obj, Function):
        text = emitter.emit([(obj, "main")], bindings, module_name(obj.name))
    else:
        raise UnsupportedError(f"emit_stablehlo: expected a Function or Module, got {obj!r}")
    if not portable:
        return text
    from tilefoundry.exits.stablehlo.jaxlib_tools import serialize_portable

    return serialize_portable(text, shardy=sharded)


def on_a_device_mesh(fn: Function, bindings: Mapping[Any, int] | None) -> bool:
    """Whether `fn` runs on a mesh of several devices, so that it is emitted as an SPMD module."""
    if fn.body is None:
        fn = select_variant(fn, bindings=dict(bindings or {}))
    # a cta mesh is the CTAs of one device: its program's meaning is the single-device module
    return bool(device_meshes(fn))


def _entry_symbols(functions) -> list[tuple[Function, str]]:
    """A Module's public functions under their names as symbols, two that mangle alike told
    apart by a suffix (a public symbol is what a caller looks up, so it stays close to the
    name)."""
    entries, taken = [], set()
    for fn in functions:
        base = mlir_symbol(fn.name, "fn")
        symbol, suffix = base, 1
        while symbol in taken:
            symbol, suffix = f"{base}_{suffix}", suffix + 1
        taken.add(symbol)
        entries.append((fn, symbol))
    return entries
