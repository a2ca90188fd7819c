"""run_xla through jit's C++ argument path (exits/xla_jit.py): our module wrapped as a
`jax.export.Exported`. The constructor and `_module_to_bytecode` are jax internals, so these tests
fail loudly when the pinned jax changes them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("jax", reason="the XLA exit needs jax[lib]")

from jax import export

from tilefoundry.errors import EvalError
from tilefoundry.exits.runtimes.xla import run_xla
from tilefoundry.exits.runtimes.xla_jit import exported_module, jitted
from tilefoundry.exits.stablehlo import emit_stablehlo
from tilefoundry.frontend import parse_source

SOURCE = """
from tilefoundry.frontend import Tensor, func


@func
def entry(a: Tensor[(4, 3), "f32"], b: Tensor[(3, 2), "f32"], n: Tensor[(2,), "i64"]):
    return a @ b, n + n
"""


def _entry():
    return parse_source(SOURCE, "<xla_jit>")["entry"]


def test_pinned_jax_exported_fields_are_the_ones_we_fill():
    """The Exported we build names every field of the pinned jax's dataclass; a jax upgrade that
    adds, drops or renames one must fail here, not at a user's call."""
    names = {f.name for f in dataclasses.fields(export.Exported)}
    assert names == {
        "fun_name", "in_tree", "in_avals", "out_tree", "out_avals", "_has_named_shardings",
        "_in_named_shardings", "_out_named_shardings", "in_shardings_hlo", "out_shardings_hlo",
        "nr_devices", "platforms", "ordered_effects", "unordered_effects",
        "disabled_safety_checks", "mlir_module_serialized", "calling_convention_version",
        "module_kept_var_idx", "uses_global_constants", "_get_vjp",
    }  # fmt: skip


def test_exported_avals_come_from_the_module_main():
    """in/out avals are read off the module's `main` signature (shapes and dtypes, i64 kept)."""
    exported = exported_module(emit_stablehlo(_entry()))
    assert [(a.shape, a.dtype.name) for a in exported.in_avals] == [
        ((4, 3), "float32"), ((3, 2), "float32"), ((2,), "int64"),
    ]  # fmt: skip
    assert [(a.shape, a.dtype.name) for a in exported.out_avals] == [
        ((4, 2), "float32"), ((2,), "int64"),
    ]  # fmt: skip


def test_jitted_module_computes_what_numpy_does():
    """DESIGN: run_xla returns numpy results shaped like the return type; compared with
    independent numpy, 64-bit integers not narrowed."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((3, 2)).astype(np.float32)
    n = np.array([2**40, -3], dtype=np.int64)
    flat = jitted(emit_stablehlo(_entry()))(a, b, n)
    np.testing.assert_allclose(flat[0], a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(flat[1], n + n)
    product, doubled = run_xla(_entry(), a, b, n)
    assert isinstance(product, np.ndarray) and doubled.dtype == np.int64
    np.testing.assert_allclose(product, a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(doubled, n + n)


def test_wrong_dtype_is_an_eval_error_naming_the_parameter():
    """Common rules: evaluation-time bad inputs are EvalError, not a raw jax error."""
    a = np.zeros((4, 3), np.float64)
    b = np.zeros((3, 2), np.float32)
    n = np.zeros((2,), np.int64)
    with pytest.raises(EvalError, match="parameter 'a' is f32"):
        run_xla(_entry(), a, b, n)


def _doubled():
    source = """
from tilefoundry.frontend import Tensor, func


@func
def twice(x: Tensor[(4,), "f32"]):
    return x + x
"""
    return parse_source(source, "<xla_jit>")["twice"]


def test_a_cached_function_still_refuses_a_wrong_dtype_and_takes_a_list():
    """A cache hit skips the argument checks only for the exact (shape, dtype, ndarray) that
    passed them: float64 of the same shape is still refused, a list is still checked and run."""
    fn = _doubled()
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run_xla(fn, x), x + x)
    with pytest.raises(EvalError, match="parameter 'x' is f32"):
        run_xla(fn, x.astype(np.float64))
    np.testing.assert_array_equal(run_xla(fn, list(x + 1)), (x + 1) * 2)  # float32 scalars
    with pytest.raises(EvalError, match="parameter 'x'"):
        run_xla(fn, np.zeros((5,), np.float32))


def test_a_cached_function_sees_a_lowered_memory_limit(monkeypatch):
    """footprint.py: "The limit is TILEFOUNDRY_MEMORY_LIMIT ... when set": a limit lowered after
    the first run still refuses the next call of the same function and shapes (run_xla reads
    the setting with libc's getenv on a hit, `footprint.memory_setting`: this fails if that
    stops seeing os.environ writes)."""
    from tilefoundry.ir.hir.footprint import MEMORY_ENV

    fn = _doubled()
    x = np.ones(4, np.float32)
    np.testing.assert_array_equal(run_xla(fn, x), x + x)
    monkeypatch.setenv(MEMORY_ENV, "8")
    with pytest.raises(
        EvalError, match=r"run_xla: Function twice needs about 32 bytes"
    ):  # x and x + x
        run_xla(fn, x)
    monkeypatch.delenv(MEMORY_ENV)
    np.testing.assert_array_equal(run_xla(fn, x), x + x)


def test_one_result_comes_back_as_the_array_and_a_wide_one_keeps_64_bits():
    """DESIGN: run_xla returns numpy results shaped like the return type; the one-result
    shortcut (`numpy_caller(flat=False)`) keeps int64 when the module is wide."""
    source = """
from tilefoundry.frontend import Tensor, func


@func
def wide(n: Tensor[(2,), "i64"]):
    return n * n
"""
    fn = parse_source(source, "<xla_jit>")["wide"]
    n = np.array([2**20 + 1, -3], dtype=np.int64)
    for _ in range(2):  # compile, then the cached call
        got = run_xla(fn, n)
        assert isinstance(got, np.ndarray) and got.dtype == np.int64
        np.testing.assert_array_equal(got, n * n)
