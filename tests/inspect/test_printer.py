"""Golden tests for the canonical printer: a dozen representative functions, printed.

The printer's contract (DESIGN §7, issue "Core IR"): deterministic, one line per named value, one
spelling per construct. Each case builds IR by hand with the toy ops of `support.toy_ops` and
compares the text with `tests/golden/printer/<case>.txt` (refresh with `pytest --update-golden`).
"""

from __future__ import annotations

import numpy as np
import pytest

from support.toy_ops import Add, Ident, Pick, Relayout
from tilefoundry.analysis import TypeInferContext
from tilefoundry.inspect import format_ir, format_type
from tilefoundry.ir.core import (
    BindingName,
    Call,
    Constant,
    DimVarRangePat,
    Module,
    SourceSpan,
    Tuple,
    Var,
    with_metadata,
)
from tilefoundry.ir.hir import ElaborationSession, Function, elaborate, make_grid_region
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Layout, Partial, Split, make_mesh

MESH = make_mesh((2, 4), names=("x", "y"))
PLAIN = make_tensor_type((8, 16), f32)
ROWS = make_shard_tensor_type((8, 16), f32, mesh=MESH, attrs=(Split(0), Broadcast()))
PARTIAL = make_shard_tensor_type((8, 16), f32, mesh=MESH, attrs=(Broadcast(), Partial("sum")))


def typed(fn: Function) -> Function:
    TypeInferContext().infer(fn)
    return fn


def named(expr, name):
    return with_metadata(expr, BindingName(name))


def fn1(name, param_type, build, return_type=None):
    x = Var("x", param_type)
    body = build(x)
    return typed(Function(name, (x,), body, return_type or param_type))


def elementwise_dag():
    a, b = Var("a", PLAIN), Var("b", PLAIN)
    shared = Call(Add(), (a, b))
    return typed(Function("dag", (a, b), Call(Add(), (shared, Call(Ident(), (shared,)))), PLAIN))


def binding_names():
    a = Var("a", PLAIN)
    first = named(Call(Ident(), (a,)), "h")
    second = named(Call(Add(), (first, first)), "h")  # a second 'h' gets a suffix
    return typed(Function("names", (a,), named(Call(Ident(), (second,)), "0"), PLAIN))


def tuple_return():
    a, b = Var("a", PLAIN), Var("b", PLAIN)
    body = Tuple((Call(Ident(), (a,)), b))
    return typed(Function("pair", (a, b), body, TupleType((PLAIN, PLAIN))))


def constants():
    scalar = make_tensor_type((), f32)
    a = Var("a", scalar)
    value = Constant(np.float32(2.5), scalar)
    table = Constant(np.arange(20, dtype=np.int32))
    body = Tuple((Call(Add(), (a, value)), Call(Ident(), (table,))))
    return typed(Function("consts", (a,), body, TupleType((scalar, table.type))))


def sharded_signature():
    a, b = Var("a", ROWS), Var("b", PARTIAL)
    return typed(
        Function("sharded", (a, b), Tuple((a, Call(Ident(), (b,)))), TupleType((ROWS, PARTIAL)))
    )


def two_meshes():
    other = make_mesh((4,), names=("t",), topology="warp")
    warp = make_shard_tensor_type((8, 16), f32, mesh=other, attrs=(Split(1),))
    a, b = Var("a", ROWS), Var("b", warp)
    return typed(Function("meshes", (a, b), Tuple((a, b)), TupleType((ROWS, warp))))


def layouts_and_storage():
    column_major = make_tensor_type((4, 8), f32, layout=Layout((4, 8), (1, 4)))
    registers = make_tensor_type((4,), i32, storage="rmem")
    a, b = Var("a", column_major), Var("b", registers)
    return typed(Function("phys", (a, b), Tuple((a, b)), TupleType((column_major, registers))))


def dim_vars():
    s = DimVar("S", 1, 129)
    t = make_tensor_type((s, 4), f32)
    return fn1("dyn", t, lambda x: Call(Ident(), (x,)))


def single_carry_loop():
    a, w = Var("a", PLAIN), Var("w", PLAIN)
    invariant = named(Call(Ident(), (w,)), "wt")

    def build(i, phis):
        step = Call(Add(), (phis[0], invariant))
        return step, [step]

    region = make_grid_region([a], 64, build, step=16, carry_names=["acc"])
    return typed(Function("loop", (a, w), named(region, "acc"), PLAIN))


def multi_carry_loop():
    a, b = Var("a", PLAIN), Var("b", PLAIN)

    def build(i, phis):
        nxt = Call(Add(), (phis[0], phis[1]))
        return Tuple((nxt, phis[0])), [nxt, phis[0]]

    region = make_grid_region([a, b], 8, build, carry_names=["x", "y"])
    return typed(Function("fib", (a, b), Call(Pick(index=0), (region,)), PLAIN))


def nested_loops():
    a = Var("a", PLAIN)

    def double(j, qs):
        twice = Call(Add(), (qs[0], qs[0]))
        return twice, [twice]

    def outer(i, phis):
        inner = make_grid_region([phis[0]], 4, double, carry_names=["q"], induction_name="j")
        return inner, [inner]

    region = make_grid_region([a], 2, outer, carry_names=["p"])
    return typed(Function("nest", (a,), region, PLAIN))


def calls_and_specializations():
    """As the frontend does: each call site targets `elaborate(g, arg types)` of one session, so
    the two sharded calls share one instance and the plain call targets `g` itself."""
    x = Var("x", PLAIN)
    g = Function("g", (x,), Call(Ident(), (x,)), PLAIN)
    a, b = Var("a", ROWS), Var("b", PLAIN)
    with ElaborationSession():
        calls = [Call(elaborate(g, [v.type]), (v,)) for v in (a, b, a)]
    return typed(Function("caller", (a, b), Tuple(calls), TupleType((ROWS, PLAIN, ROWS))))


def dispatch():
    s = DimVar("S", 1, 129)
    t = make_tensor_type((s,), f32)
    base = Function("scale", (Var("x", t),), None, t)
    for lo, hi, label in ((1, 64, "small"), (64, 129, "large")):
        x = Var("x", t)
        body = Call(Ident(), (x,)) if label == "small" else Call(Add(), (x, x))
        base.add_variant(
            Function(
                "scale", (x,), body, t, specializations=(DimVarRangePat("S", lo, hi),), label=label
            )
        )
    module = Module("m", [base])
    typed(base)
    return module


def module_with_relayout():
    x = Var("x", PLAIN)
    spread = Function("spread", (x,), Call(Relayout(layout=ROWS.layout), (x,)), ROWS)
    y = Var("y", ROWS)
    keep = Function("keep", (y,), Call(Ident(), (y,)), ROWS)
    return Module("mod", [typed(spread), typed(keep)])


CASES = {
    "elementwise_dag": elementwise_dag,
    "binding_names": binding_names,
    "tuple_return": tuple_return,
    "constants": constants,
    "sharded_signature": sharded_signature,
    "two_meshes": two_meshes,
    "layouts_and_storage": layouts_and_storage,
    "dim_vars": dim_vars,
    "single_carry_loop": single_carry_loop,
    "multi_carry_loop": multi_carry_loop,
    "nested_loops": nested_loops,
    "calls_and_specializations": calls_and_specializations,
    "dispatch": dispatch,
    "module_with_relayout": module_with_relayout,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_printer_golden(case, golden):
    golden(f"printer/{case}.txt", format_ir(CASES[case]()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_printing_is_deterministic_across_builds(case):
    assert format_ir(CASES[case]()) == format_ir(CASES[case]())


def test_locations_are_printed_on_request():
    a = Var("a", PLAIN)
    body = with_metadata(Call(Ident(), (a,)), SourceSpan("prog.py", 3, 9))
    text = format_ir(typed(Function("f", (a,), body, PLAIN)), locations=True)
    assert "%0 = ident(%a) : f32[8, 16]  loc(prog.py:3:9)" in text


@pytest.mark.parametrize(
    ("type_", "text"),
    [
        (PLAIN, "f32[8, 16]"),
        (make_tensor_type((4,), i32, storage="rmem"), "i32[4] rmem"),
        # shard-layout §6: S(i) / P(sum) / B sugar; each mesh axis printed with its state
        (PARTIAL, "f32[8, 16] #shard<@mesh[x=B, y=P(sum)], (8,16):(16,1)>"),
        (ROWS, "f32[8, 16] #shard<@mesh[x=S(0), y=B], (2,4,16):(64,16,1)>"),
        (TupleType((PLAIN, PLAIN)), "(f32[8, 16], f32[8, 16])"),
    ],
)
def test_type_spellings(type_, text):
    assert format_type(type_) == text
