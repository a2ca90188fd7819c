"""The StableHLO engine on toy ops: functions, calls, loops, constants, version pinning
(SFEP-0053 §3.7; DESIGN §6). Every emitted module is checked by jaxlib (parse + verify +
portable serialisation at the pinned target) and run on XLA against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest

from support.toy_ops import Add, Ident, Pick
from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Call, Constant, Tuple, Var
from tilefoundry.ir.hir import ElaborationSession, Function, elaborate, make_grid_region
from tilefoundry.ir.types import DimVar, TupleType, f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import Layout, Split, make_mesh

jax = pytest.importorskip("jax", reason="the StableHLO toolchain tests need jax[lib]")

from tilefoundry.exits.runtimes.xla import run_xla  # noqa: E402
from tilefoundry.exits.stablehlo import STABLEHLO_TARGET_VERSION, emit_stablehlo  # noqa: E402
from tilefoundry.exits.stablehlo.jaxlib_tools import parse_and_verify, serialize_portable  # noqa: E402
from tilefoundry.exits.stablehlo.module_header import VERSION_ATTRIBUTE  # noqa: E402

T = make_tensor_type((4,), f32)


def typed(fn):
    TypeInferContext().infer(fn)
    return fn


def checked(fn, bindings=None):
    text = emit_stablehlo(fn, bindings=bindings)
    parse_and_verify(text)
    artifact = serialize_portable(text)
    assert artifact.startswith(b"ML\xefR")  # MLIR bytecode magic of a portable artifact
    return text


def doubling_loop():
    """acc = a; for i in range(0, 12, 4): acc = acc + a  -> 4a"""
    a = Var("a", T)

    def build(i, phis):
        step = Call(Add(), (phis[0], a))
        return step, [step]

    return typed(Function("loop", (a,), make_grid_region([a], 12, build, step=4), T))


def test_version_is_pinned_and_recorded():
    # SFEP §3.7: the target version is pinned in code and recorded in the module
    text = checked(doubling_loop())
    assert f'{VERSION_ATTRIBUTE} = "{STABLEHLO_TARGET_VERSION}"' in text


def test_loop_lowers_to_while_and_runs():
    fn = doubling_loop()
    text = checked(fn)
    assert '"stablehlo.while"' in text
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_xla(fn, a), 4 * a)


def test_multi_carry_loop_with_tuple_projection():
    a, b = Var("a", T), Var("b", T)

    def build(i, phis):
        nxt = Call(Add(), (phis[0], phis[1]))
        return Tuple((nxt, phis[0])), [nxt, phis[0]]

    region = make_grid_region([a, b], 5, build)
    fn = typed(Function("fib", (a, b), Call(Pick(index=0), (region,)), T))
    checked(fn)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    for _ in range(5):
        x, y = x + y, x
    np.testing.assert_array_equal(run_xla(fn, np.ones(4, np.float32), np.zeros(4, np.float32)), x)


def test_calls_become_private_functions_and_tuples_flatten():
    x = Var("x", T)
    g = Function("g", (x,), Tuple((Call(Add(), (x, x)), x)), TupleType((T, T)))
    a = Var("a", T)
    with ElaborationSession():
        body = Call(elaborate(g, [T]), (a,))
    fn = typed(Function("caller", (a,), body, TupleType((T, T))))
    text = checked(fn)
    assert "func.func private @g" in text and "func.call @g" in text
    value = np.arange(4, dtype=np.float32)
    doubled, same = run_xla(fn, value)
    np.testing.assert_array_equal(doubled, 2 * value)
    np.testing.assert_array_equal(same, value)


def test_constants_and_dim_var_bindings():
    s = DimVar("S", 1, 65)
    dyn = make_tensor_type((s,), f32)
    a = Var("a", dyn)
    fn = typed(Function("dyn", (a,), Call(Ident(), (a,)), dyn))
    with pytest.raises(UnsupportedError, match="StableHLO exit: extent S is symbolic; emit with"):
        emit_stablehlo(fn)
    checked(fn, bindings={"S": 3})
    np.testing.assert_array_equal(run_xla(fn, np.ones(7, np.float32)), np.ones(7, np.float32))
    k = Constant(np.array([1, 2, 3, 4], np.float32), T)
    b = Var("b", T)
    plus = typed(Function("plus", (b,), Call(Add(), (b, k)), T))
    checked(plus)
    np.testing.assert_array_equal(run_xla(plus, np.zeros(4, np.float32)), [1, 2, 3, 4])


@pytest.mark.parametrize(
    ("param_type", "match"),
    [
        # DESIGN §6: physical layouts not expressible as logical order are refused at this exit
        (make_tensor_type((2, 4), f32, layout=Layout((2, 4), (1, 2))), "physical layout"),
        # sharded values go to the SPMD exit (one emitter), which maps only device meshes; a
        # cta grid is one device's (DESIGN §4.13) and emits its unsharded meaning instead
        (
            make_shard_tensor_type(
                (8,), f32, mesh=make_mesh((2,), ("x",), topology="warp"), attrs=(Split(0),)
            ),
            "runs on the warp topology",
        ),
        # an op that declares no access relation has no per-device block reading
        (
            make_shard_tensor_type((8,), f32, mesh=make_mesh((2,), ("x",)), attrs=(Split(0),)),
            "declares no access relation",
        ),
    ],
)
def test_inexpressible_layouts_fail_closed(param_type, match):
    x = Var("x", param_type)
    fn = typed(Function("f", (x,), Call(Ident(), (x,)), param_type))
    with pytest.raises(UnsupportedError, match=match):
        emit_stablehlo(fn)
