"""The canonical IR printer: one line per named value, deterministic, readable.

    mesh @mesh = device(4)[x=4]
    func @mlp(%x: f32[8, 16], %w: f32[16, 4]) -> f32[8, 4] {
      %h = matmul(%x, %w) : f32[8, 4]
      %0 = relu(%h) : f32[8, 4]
      return %0
    }

Values are numbered in a depth-first post-order walk from the returned value, so the same IR always
prints the same text. A value keeps the name its author bound (`BindingName` metadata) when that
name is free, else it gets the next number. A called Function is printed once per distinct
instance (elaboration makes one per specialization), after its first caller, as `@name`,
`@name.1`, .... A Call of a FusionRegion prints as a nested block whose region inputs read as
the outer argument names (`%3 = fusion(%a, %b) kind=loop { ... yield %2 } : type`). A
GridRegionExpr prints as a nested block; the values its body computes without
reading the loop's own variables are printed before the block, so every name is defined before
it is used and in the scope where it is used.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any

import numpy as np

from tilefoundry.ir.core import Call, Constant, Expr, Module, Op, Tuple, Var, binding_name
from tilefoundry.ir.core import source_span as span_of
from tilefoundry.ir.core.graph import iter_nodes, post_order
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.hir.facts import LoopReads
from tilefoundry.ir.text.type_text import MeshNames, format_shard_layout, format_type
from tilefoundry.ir.types import DType, format_dim
from tilefoundry.ir.types.shard import Layout, ShardLayout
from tilefoundry.rules import surface_of

INDENT = "  "


def op_spelling(op: Op) -> tuple[str, dict[str, Any]]:
    """An op's printed name and the attributes printed after it. The name is its declared
    `Op.mnemonic`, else its DSL surface name (`broadcast_to`, `rms_norm`; an entry that fixes
    attributes states them, so `Binary(kind=ADD)` prints as `add`, without `kind=add`), else,
    for an op that declares neither, its class name. An optional attribute left unset is not
    printed (`zeros[shape=..., dtype=f32, storage=gmem]`, not `..., layout=none]`): its absence is
    the op's default meaning, and ops gaining an optional attribute keep their spelling."""
    unset = {p.name for p in type(op).param_defs() if p.optional}
    attrs = {k: v for k, v in op.attributes().items() if not (v is None and k in unset)}
    if type(op).mnemonic is not None:
        return type(op).mnemonic, attrs
    entry = surface_of(op)
    if entry is None:
        return type(op).__name__, attrs
    return entry.name, {k: v for k, v in attrs.items() if k not in entry.fixed}


def op_mnemonic(op: Op) -> str:
    return op_spelling(op)[0]


class _Printer:
    def __init__(self, *, locations: bool):
        self.locations = locations
        self.meshes = MeshNames()
        self.names: dict[Expr, str] = {}
        self.taken: set[str] = set()
        self.counter = 0
        self.function_symbols: dict[Function, str] = {}
        self.function_queue: list[Function] = []
        self._reads = LoopReads()

    # ---- naming -------------------------------------------------------------------------------

    def _fresh(self, wanted: str | None) -> str:
        if wanted is not None and wanted.isdigit():
            wanted = None  # numbers are the printer's own names for unnamed values
        if wanted and wanted not in self.taken:
            name = wanted
        elif wanted:
            suffix = 1
            while f"{wanted}.{suffix}" in self.taken:
                suffix += 1
            name = f"{wanted}.{suffix}"
        else:
            while str(self.counter) in self.taken:
                self.counter += 1
            name = str(self.counter)
            self.counter += 1
        self.taken.add(name)
        return name

    def bind(self, expr: Expr, wanted: str | None = None) -> str:
        name = self._fresh(wanted if wanted is not None else binding_name(expr))
        self.names[expr] = name
        return f"%{name}"

    def ref(self, expr: Expr) -> str:
        return f"%{self.names[expr]}"

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Names bound inside (a variant body) are forgotten on exit."""
        saved = dict(self.names), set(self.taken), self.counter
        try:
            yield
        finally:
            self.names, self.taken, self.counter = saved

    def function_symbol(self, fn: Function) -> str:
        if fn not in self.function_symbols:
            used = set(self.function_symbols.values())
            symbol, suffix = fn.name, 1
            while symbol in used:
                symbol, suffix = f"{fn.name}.{suffix}", suffix + 1
            self.function_symbols[fn] = symbol
            self.function_queue.append(fn)
        return f"@{self.function_symbols[fn]}"

    # ---- the pre-pass: every mesh is known before the first line is printed -------------------

    def collect(self, roots: tuple[Expr, ...]) -> None:
        for expr in iter_nodes(*roots, edges=_everything_printed):
            self.meshes.collect_type(expr.type)
            if isinstance(expr, Function):
                for param in expr.params:
                    self.meshes.collect_type(param.type)
                self.meshes.collect_type(expr.return_type)
            if isinstance(expr, Call) and not isinstance(expr.target, Expr):
                for value in expr.target.attributes().values():
                    if isinstance(value, ShardLayout):
                        self.meshes.add(value.mesh)

    # ---- values ---------------------------------------------------------------------------------

    def emit(self, expr: Expr, lines: list[str], depth: int) -> None:
        """Print `expr` and everything it needs that is not printed yet (post-order, operands
        left to right). Only a nested block (loop, fusion region) recurses, once per level of
        nesting."""
        names = self.names
        for node in post_order((expr,), _one_block, done=names):
            if node in names:  # a loop prints its invariants before itself
                continue
            if isinstance(node, Var):
                self.bind(node, node.name)  # a free Var (printing a bare expression) as is
            elif isinstance(node, GridRegionExpr):
                self.emit_region(node, lines, depth)
            elif isinstance(node, Call) and isinstance(node.target, FusionRegion):
                self.emit_fusion(node, lines, depth)
            else:
                lines.append(INDENT * depth + self.value_line(node))

    def value_line(self, expr: Expr) -> str:
        if isinstance(expr, Constant):
            rhs = f"constant {_format_constant(expr.value)}"
        elif isinstance(expr, Tuple):
            rhs = f"tuple({', '.join(self.ref(e) for e in expr.elements)})"
        elif isinstance(expr, Call) and isinstance(expr.target, Function):
            args = ", ".join(self.ref(a) for a in expr.args)
            rhs = f"call {self.function_symbol(expr.target)}({args})"
        elif isinstance(expr, Call):
            args = ", ".join(self.ref(a) for a in expr.args)
            name, attrs = op_spelling(expr.target)
            rhs = f"{name}{self.format_attrs(attrs)}({args})"
        else:
            rhs = f"<{type(expr).__name__}>"
        lhs = self.bind(expr)
        return f"{lhs} = {rhs} : {format_type(expr.type, self.meshes)}{self.location(expr)}"

    def emit_region(self, region: GridRegionExpr, lines: list[str], depth: int) -> None:
        for init in region.init_args:
            self.emit(init, lines, depth)
        self._hoist_invariants(region, lines, depth)
        lhs = self.bind(region)
        induction = self.bind(region.induction_var, region.induction_var.name)
        carries = ", ".join(
            f"{self.bind(phi, phi.name)} = {self.ref(init)}"
            for phi, init in zip(region.carried_args, region.init_args, strict=True)
        )
        bounds = ", ".join(format_dim(d) for d in (region.start, region.extent, region.step))
        header = f"grid_region {induction} in range({bounds})"
        if carries:
            header += f" carry({carries})"
        inner: list[str] = []
        for value in (region.body, *region.yield_values):
            self.emit(value, inner, depth + 1)
        yielded = ", ".join(self.ref(v) for v in region.yield_values)
        if region.body not in region.yield_values:
            inner.append(INDENT * (depth + 1) + f"body {self.ref(region.body)}")
        inner.append(INDENT * (depth + 1) + f"yield {yielded}".rstrip())
        lines.append(INDENT * depth + f"{lhs} = {header} {{")
        lines.extend(inner)
        lines.append(
            INDENT * depth + f"}} : {format_type(region.type, self.meshes)}{self.location(region)}"
        )

    def emit_fusion(self, call: Call, lines: list[str], depth: int) -> None:
        region = call.target
        for var, arg in zip(region.inputs, call.args, strict=True):
            self.names[var] = self.names[arg]
        lhs = self.bind(call)
        args = ", ".join(self.ref(a) for a in call.args)
        lines.append(INDENT * depth + f"{lhs} = fusion({args}) kind={region.kind} {{")
        for output in region.outputs:
            self.emit(output, lines, depth + 1)
        yielded = ", ".join(self.ref(o) for o in region.outputs)
        lines.append(INDENT * (depth + 1) + f"yield {yielded}")
        lines.append(
            INDENT * depth + f"}} : {format_type(call.type, self.meshes)}{self.location(call)}"
        )

    def _hoist_invariants(self, region: GridRegionExpr, lines: list[str], depth: int) -> None:
        """Print, before the block, the body values that read none of this loop's variables."""
        reads = self._reads
        local = reads.bound_by(region)
        for value in (region.body, *region.yield_values):
            for node in post_order((value,), _one_block):
                unprinted = node not in self.names and not isinstance(node, Var)
                if unprinted and not (reads.of(node) & local):
                    self.emit(node, lines, depth)

    def format_attrs(self, attrs: dict[str, Any]) -> str:
        if not attrs:
            return ""
        parts = [f"{k}={self.format_attr(v)}" for k, v in attrs.items()]
        return "[" + ", ".join(parts) + "]"

    def format_attr(self, value: Any) -> str:
        if value is None:
            return "none"
        if isinstance(value, Enum):
            return value.name.lower()
        if isinstance(value, DType):
            return value.name
        if isinstance(value, ShardLayout):
            return format_shard_layout(value, self.meshes)
        if isinstance(value, Layout):  # a Reshard's plain target (hir Reshard sugar)
            return f"#layout<{value}>"
        if isinstance(value, tuple):
            inner = ", ".join(self.format_attr(v) for v in value)
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        if isinstance(value, str):
            return repr(value)
        return format_dim(value) if not isinstance(value, bool | float) else repr(value)

    def location(self, expr: Expr) -> str:
        if not self.locations:
            return ""
        span = span_of(expr)
        return f"  loc({span.file}:{span.line}:{span.col})" if span else ""

    # ---- functions and modules ----------------------------------------------------------------

    def function_lines(self, fn: Function, symbol: str) -> list[str]:
        params = ", ".join(
            f"{self.bind(p, p.name)}: {format_type(p.type, self.meshes)}" for p in fn.params
        )
        head = f"func @{symbol}({params}) -> {format_type(fn.return_type, self.meshes)}"
        head += _where_clause(fn)
        if fn.label is not None:
            head += f" label {fn.label!r}"
        if fn.body is None:
            lines = [head + " dispatch {"]
            for variant in fn.variants:
                (pattern,) = variant.specializations
                with self.scope():
                    # a variant shares its base's signature; its own Vars print as the base's
                    for own, shared in zip(variant.params, fn.params, strict=True):
                        self.names[own] = self.names[shared]
                    body = self.body_lines(variant, depth=2)
                label = f" label {variant.label!r}" if variant.label is not None else ""
                case = f"{pattern.dim_var} in [{pattern.lo}, {pattern.hi})"
                lines += [f"{INDENT}variant {case}{label} {{", *body, f"{INDENT}}}"]
            return [*lines, "}"]
        return [head + " {", *self.body_lines(fn, depth=1), "}"]

    def body_lines(self, fn: Function, depth: int) -> list[str]:
        for param in fn.params:
            if param not in self.names:
                self.bind(param, param.name)
        lines: list[str] = []
        self.emit(fn.body, lines, depth)
        lines.append(INDENT * depth + f"return {self.ref(fn.body)}")
        return lines

    def print_functions(self, roots: list[Function]) -> list[str]:
        """Print `roots` under their own names, then every function instance called so far or
        from them, each once, in call order."""
        for fn in roots:
            self.function_symbols.setdefault(fn, fn.name)
        queue, out, done = [*roots, *self.function_queue], [], set()
        while queue:
            fn = queue.pop(0)
            if fn in done:
                continue
            done.add(fn)
            with self.scope():
                self.names, self.taken, self.counter = {}, set(), 0
                out += self.function_lines(fn, self.function_symbols[fn])
            queue += [f for f in self.function_queue if f not in done and f not in queue]
        return out


def _one_block(node: Expr) -> tuple[Expr, ...]:
    """The operands a block prints before a node: none for a loop, which prints its own."""
    return () if isinstance(node, GridRegionExpr) else node.operands()


def _everything_printed(expr: Expr) -> tuple[Expr, ...]:
    """Every node whose type the text shows, from `expr`: operands, loop carries, called
    functions (their variants and bodies) and fusion region bodies."""
    found: tuple[Expr, ...] = ()
    if isinstance(expr, Function):
        found = (*expr.variants, *(() if expr.body is None else (expr.body,)))
    if isinstance(expr, FusionRegion):
        found = expr.outputs
    if isinstance(expr, Call) and isinstance(expr.target, Expr):
        found = (expr.target,)
    if isinstance(expr, GridRegionExpr):
        found = expr.carried_args
    return (*found, *expr.operands())


def _where_clause(fn: Function) -> str:
    """`where S in [1, 9)` for every DimVar of the signature, sorted by name."""
    from tilefoundry.ir.types import dim_vars, tensor_fields

    found = {}
    for type_ in (*(p.type for p in fn.params), fn.return_type):
        for tensor in tensor_fields(type_):
            for dim in tensor.shape:
                for var in dim_vars(dim):
                    found[var.name] = var
    if not found:
        return ""
    parts = [f"{v.name} in [{v.lo}, {v.hi})" for _, v in sorted(found.items())]
    return " where " + ", ".join(parts)


def _format_constant(value: Any) -> str:
    if isinstance(value, bool | int | float):
        return repr(value)
    array = np.asarray(value)
    if array.ndim == 0:
        return repr(array.item())
    flat = ", ".join(repr(v) for v in array.reshape(-1)[:16].tolist())
    more = ", ..." if array.size > 16 else ""
    return f"dense<[{flat}{more}]>"


def format_ir(obj: Any, *, locations: bool = False) -> str:
    """The canonical text of a Module, Function, Expr or Type (`locations` adds `loc(...)`)."""
    printer = _Printer(locations=locations)
    if isinstance(obj, Module | Function | Expr):
        printer.collect(obj.functions if isinstance(obj, Module) else (obj,))
    if isinstance(obj, Module):
        lines = printer.print_functions(list(obj.functions))
        lines = [*printer.meshes.declarations(), *lines]
        return "\n".join([f"module @{obj.name} {{", *(INDENT + ln for ln in lines), "}"]) + "\n"
    if isinstance(obj, Function):
        lines = printer.print_functions([obj])
        return "\n".join([*printer.meshes.declarations(), *lines]) + "\n"
    if isinstance(obj, Expr):
        lines = []
        printer.emit(obj, lines, 0)
        lines += printer.print_functions([])
        return "\n".join([*printer.meshes.declarations(), *lines]) + "\n"
    return format_type(obj) + "\n"
