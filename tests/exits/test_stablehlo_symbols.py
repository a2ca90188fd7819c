"""Names and extents the StableHLO text cannot spell are mangled or refused by the exit, never
left for jaxlib to reject (issue 20: "names that are not valid MLIR symbols are mangled
deterministically"; "dimensions >= 2^63 accepted by `emit`")."""

from __future__ import annotations

import pytest

from support.functions import call, function_of
from support.toy_ops import Add
from tilefoundry.errors import UnsupportedError
from tilefoundry.ir.core import Module
from tilefoundry.ir.lowering.mlir_text import mlir_symbol
from tilefoundry.ir.types import DimVar, f32, make_tensor_type

pytest.importorskip("jax", reason="jaxlib checks the emitted text")

from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.exits.stablehlo.jaxlib_tools import parse_and_verify

T = make_tensor_type((4,), f32)


@pytest.mark.parametrize(
    ("name", "symbol"),
    [
        ("mlp", "mlp"),
        ("row_softmax", "row_softmax"),
        ("函数", "_U51FD__U6570_"),
        ("café", "caf_UE9_"),
        ("a.b-c", "a_b_c"),
        ("3d", "_3d"),
        ("", "tilefoundry"),
    ],
)
def test_mlir_symbols_are_mangled_deterministically(name, symbol):
    assert mlir_symbol(name) == symbol


def doubled(name):
    return function_of({"x": T}, lambda x: call(Add(), x, x), name=name)


def test_a_non_ascii_function_name_emits_text_jaxlib_accepts():
    text = emit_stablehlo(doubled("函数"))
    assert "module @_U51FD__U6570_ " in text
    parse_and_verify(text)


def test_a_module_of_functions_that_mangle_alike_keeps_them_apart():
    module = Module("モジュール", (doubled("函数"), doubled("_U51FD__U6570_"), doubled("café")))
    text = emit_stablehlo(module)
    for symbol in ("@_U51FD__U6570_(", "@_U51FD__U6570__1(", "@caf_UE9_("):
        assert f"func.func public {symbol}" in text
    parse_and_verify(text)


def test_an_extent_of_2_to_the_63_is_refused_not_emitted():
    n = DimVar("N", 1, 2**64)
    fn = function_of({"x": make_tensor_type((n,), f32)}, lambda x: call(Add(), x, x))
    with pytest.raises(UnsupportedError, match=r"extent 9223372036854775808 .* \[0, 2\*\*63\)"):
        emit_stablehlo(fn, bindings={"N": 2**63})
    assert "tensor<9223372036854775807xf32>" in emit_stablehlo(fn, bindings={"N": 2**63 - 1})
