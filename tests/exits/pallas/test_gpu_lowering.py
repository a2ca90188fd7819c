# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Tile kernels lowered for CUDA on a machine without a GPU (issue 27 items 1-3).

jax 0.10.2 lowers a Pallas kernel for `cuda` anywhere (`jax.jit(f).trace(*specs).lower(
lowering_platforms=("cuda",))`, `lower_for_cuda`): Pallas -> Triton IR, embedded as the custom
call `__gpu$xla.gpu.triton`, or Pallas -> Mosaic GPU (`mosaic_gpu_v2`) — what a GPU machine runs
up to the PTX compile. Triton's lowering is part of jax; Mosaic GPU's imports absl-py (the
`gpu-lowering` extra), so without it the Mosaic tests skip and say why.

DESIGN §1: whatever a backend cannot lower is refused up front, located, with the fix — never a
failure inside jax's lowering. The refusals are held to the truth: the same kernel, lowered
without the checks, fails in jax.
"""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.pallas import MosaicGpu, Triton, lower_for_cuda, lower_pallas, run_pallas
from tilefoundry.ir.types.shard import Layout, make_mesh
from tilefoundry.passes import compile

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
KERNELS = ("flash_attention", "online_softmax", "tiled_matmul")
CTAS = make_mesh((2,), ("r",), topology="cta")

mosaic = pytest.mark.skipif(
    importlib.util.find_spec("absl") is None,
    reason="Mosaic GPU's lowering imports absl-py: pip install -e '.[gpu-lowering]'",
)


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _zeros(fn) -> list[np.ndarray]:
    return [np.zeros(p.type.shape, p.type.dtype.to_numpy()) for p in fn.params]


def _raw_lowering(fn, arrays, backend) -> str:
    """The kernel lowered for cuda without the exit's GPU checks (what jax itself does)."""
    import jax

    kernel = lower_pallas(fn, *arrays)
    call = kernel.call(interpret=False, compiler_params=backend.compiler_params(_tiles()))
    return jax.jit(call).trace(*kernel.input_structs()).lower(lowering_platforms=("cuda",))


def _tiles():
    from tilefoundry.exits.pallas.gpu import KernelTiles

    return KernelTiles(largest=256, has_loop=False)


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("fused", [False, True], ids=["as-written", "compiled"])
def test_every_example_kernel_lowers_for_cuda_through_triton(name, fused):
    """Issue 27 done-when: tiled_matmul, online_softmax and flash_attention lower with Triton."""
    fn = compile(_example(name))[0] if fused else _example(name)
    text = lower_for_cuda(fn, *_zeros(fn))
    assert text.count(f"@{Triton.custom_call}") == 1
    assert "dynamic_slice" not in text.split(Triton.custom_call)[0]


def test_triton_params_are_derived_from_the_tiles_or_given():
    """One warp per 256 elements of the largest tile (16 x 64 = 1024: 4 warps), 2 stages for a
    kernel with a tile loop; given values reach the launch unchanged."""
    fn = _example("tiled_matmul")
    derived = lower_for_cuda(fn, *_zeros(fn))
    assert re.search(r"num_stages = 2 : i32, num_warps = 4 : i32", derived)
    given = lower_for_cuda(fn, *_zeros(fn), gpu_backend=Triton(num_warps=8, num_stages=3))
    assert re.search(r"num_stages = 3 : i32, num_warps = 8 : i32", given)


def test_a_backend_is_chosen_by_name_or_refused():
    with pytest.raises(UnsupportedError, match="not one of triton, mosaic"):
        run_pallas(_example("online_softmax"), np.zeros((8, 64), np.float32), gpu_backend="cuda")
    with pytest.raises(UnsupportedError, match="power of two from 1 to 32"):
        Triton(num_warps=3)


@func
def rows_of_24(x: Tensor[(48 @ CTAS.r, 16), "f32"]):
    return tf.exp(x)


@func
def small_dot(a: Tensor[(8, 8), "f32"], b: Tensor[(8, 8), "f32"]):
    return a @ b


@func
def into_fp4(x: Tensor[(16, 16), "f32"]):
    return tf.cast(tf.cast(x, "f4e2m1"), "f32")


@func
def staged_tile(x: Tensor[(512, 64), "f32"], y: Tensor[(512, 64), "f32"]):
    tile_ = Layout((512, 64))  # a storage change names its layout (hir Reshard)
    return tf.reshard(x, layout=tile_, storage="smem") + tf.reshard(y, layout=tile_, storage="smem")


@func
def batched(a: Tensor[(4, 32, 32), "f32"], b: Tensor[(4, 32, 32), "f32"]):
    return a @ b


@func
def thin_dot(a: Tensor[(8, 2048), "f32"], b: Tensor[(2048, 8), "f32"]):
    return a @ b


REFUSALS = {
    "rows_of_24": (
        rows_of_24,
        r"block of parameter 'x' is \(24, 16\) per CTA: 24 along axis 0; "
        r"Triton needs power-of-two blocks; use 16 or 32",
    ),
    "thin_dot": (
        thin_dot,
        r"MatMul: on a GPU backend a matmul of \(8, 2048\) x \(2048, 8\) as a multiply reduced "
        r"over K .* \(8, 2048, 8\) intermediate \(131072 elements\), more than the 16384",
    ),
    "into_fp4": (into_fp4, r"Cast: its result is f4e2m1, which Triton has no arithmetic for"),
    "staged_tile": (staged_tile, r"needs 393216 bytes of shared memory .* 101376-byte budget"),
    "batched": (
        batched,
        r"MatMul: .* \(4, 32, 32, 32\) intermediate .* give each CTA a 2-D matmul of 16 or more",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_kernel_breaking_a_triton_constraint_is_refused_up_front_located(name):
    """Issue 27 item 2: block shapes, matmul sizes, dtypes, shared memory, each refused before
    lowering, at the line of the value, naming the constraint and the fix."""
    fn, message = REFUSALS[name]
    with pytest.raises(UnsupportedError, match=message) as refused:
        lower_for_cuda(fn, *_zeros(fn))
    assert refused.value.location is not None
    assert refused.value.location.file == __file__


@pytest.mark.parametrize("name", ["rows_of_24"])
def test_the_refusals_are_what_jax_would_fail_on(name):
    """The same kernels lowered without the checks fail inside jax (the refusal is the truth)."""
    fn, _ = REFUSALS[name]
    with pytest.raises((NotImplementedError, ValueError, AssertionError)):
        _raw_lowering(fn, _zeros(fn), Triton())


def test_naming_a_backend_while_interpreting_checks_its_constraints():
    """A CPU run with gpu_backend= says what the GPU would refuse; a kernel that passes runs
    interpreted and equals numpy."""
    x = np.random.default_rng(27).standard_normal((48, 16)).astype(np.float32)
    with pytest.raises(UnsupportedError, match="power-of-two blocks"):
        run_pallas(rows_of_24, x, interpret=True, gpu_backend="triton")
    np.testing.assert_allclose(run_pallas(rows_of_24, x, interpret=True), np.exp(x), rtol=1e-6)
    x = np.random.default_rng(28).standard_normal((8, 64)).astype(np.float32)
    got = run_pallas(_example("online_softmax"), x, interpret=True, gpu_backend="triton")
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@func
def wide_rows(x: Tensor[(64 @ CTAS.r, 128), "f32"], y: Tensor[(64 @ CTAS.r, 128), "f32"]):
    return tf.where(x > y, tf.exp(x), tf.tanh(y) * 0.5)


@mosaic
def test_an_elementwise_kernel_over_whole_warpgroups_lowers_through_mosaic_gpu():
    text = lower_for_cuda(wide_rows, *_zeros(wide_rows), gpu_backend="mosaic")
    assert f"@{MosaicGpu.custom_call}" in text and Triton.custom_call not in text


@mosaic
def test_mosaic_gpu_refuses_a_matmul_and_blocks_below_a_warpgroup():
    """Mosaic GPU's pallas_call path has no dot_general and copies whole warpgroups; jax's
    default (Mosaic GPU, no compiler params) fails on the same matmul kernel."""
    fn = _example("tiled_matmul")
    with pytest.raises(UnsupportedError, match="Mosaic GPU cannot lower `dot_general`") as err:
        lower_for_cuda(fn, *_zeros(fn), gpu_backend="mosaic")
    example = Path(err.value.location.file).read_text().splitlines()
    assert "a[:, k] @ b[k]" in example[err.value.location.line - 1]  # the tile matmul's line
    with pytest.raises(NotImplementedError, match="dot_general"):
        _raw_lowering(fn, _zeros(fn), MosaicGpu())
    below = r"\(8, 8\) per CTA \(64 elements\).* multiple of 128"
    with pytest.raises(UnsupportedError, match=below):
        lower_for_cuda(small_dot, *_zeros(small_dot), gpu_backend="mosaic")


@func
def looped(x: Tensor[(16, 64), "f32"]):
    acc = tf.zeros((16, 16), "f32")
    for j in tile(64, 16):
        acc = acc + tf.exp(x[:, j])
    return acc


def test_a_tile_loop_reads_its_windows_through_the_ref_on_the_gpu_path():
    """The window of a parameter is a `pl.ds` read of its Ref, so Triton sees loads at a
    dynamic offset and no `dynamic_slice` (which it has no rule for)."""
    text = lower_for_cuda(looped, *_zeros(looped))
    assert f"@{Triton.custom_call}" in text


_WIDE = {"i64": "i32", "u64": "u32", "f64": "f32"}


def _narrowed(value, dtype):
    """`value` cast to the 32-bit dtype of a 64-bit `dtype` (itself otherwise)."""
    from tilefoundry.ir.core import Call
    from tilefoundry.ir.hir.tensor.cast import Cast
    from tilefoundry.ir.types import DType

    narrow = _WIDE.get(dtype.name)
    return value if narrow is None else Call(Cast(dtype=DType.from_name(narrow)), (value,))


def _one_op_kernel(name: str, sample, loaded: bool = False):
    """The sample's op applied to gmem parameters (a tuple operand built from one parameter per
    field). The exit refuses 64-bit values at the kernel boundary, so a 64-bit operand is a
    32-bit parameter cast up inside the kernel, and a 64-bit result is cast down before it
    leaves. `loaded`: every operand goes through a Cast first, so the op reads values in
    registers (what it sees inside a fused kernel), not its parameters' Refs."""
    from tilefoundry.analysis import TypeInferContext
    from tilefoundry.ir.core import Call, Tuple, Var
    from tilefoundry.ir.hir import Function
    from tilefoundry.ir.hir.tensor.cast import Cast
    from tilefoundry.ir.hir.tensor.tuple_get_item import TupleGetItem
    from tilefoundry.ir.types import DType, TensorType, TupleType
    from tilefoundry.rules.validation_samples import TupleOperand

    params, args = [], []
    for i, operand in enumerate(sample.operands):
        leaves = []
        fields = operand.fields if isinstance(operand, TupleOperand) else (operand,)
        for j, field in enumerate(fields):
            narrow = DType.from_name(_WIDE.get(field.dtype.name, field.dtype.name))
            param = Var(f"x{i}_{j}", TensorType(field.shape, narrow))
            params.append(param)
            leaves.append(
                param
                if narrow == field.dtype and not loaded
                else Call(Cast(dtype=field.dtype), (param,))
            )
        args.append(Tuple(tuple(leaves)) if isinstance(operand, TupleOperand) else leaves[0])
    call = Call(sample.op_for(None), tuple(args))
    out = TypeInferContext().infer(call)
    if isinstance(out, TupleType):
        items = [Call(TupleGetItem(index=k), (call,)) for k in range(len(out.fields))]
        body = Tuple(tuple(_narrowed(v, t.dtype) for v, t in zip(items, out.fields, strict=True)))
    else:
        body = _narrowed(call, out.dtype)
    return Function(name, tuple(params), body, TypeInferContext().infer(body))


def _one_op_kernels(loaded: bool = False):
    """One kernel per validation sample of every op with a PALLAS rule (`_one_op_kernel`)."""
    from tilefoundry.rules import PALLAS, VALIDATION_SAMPLES

    for cls in sorted(PALLAS.registered(), key=lambda c: c.__name__):
        if not cls.__module__.startswith("tilefoundry.") or not VALIDATION_SAMPLES.has(cls):
            continue
        samples = VALIDATION_SAMPLES.lookup(cls)()
        for index, sample in enumerate([] if isinstance(samples, str) else samples):
            if callable(sample.op) and not hasattr(sample.op, "params"):
                continue
            fn = _one_op_kernel(f"{cls.__name__}_{index}", sample, loaded)
            where = "values" if loaded else "refs"
            yield pytest.param(fn, id=f"{cls.__name__}-{index}-{where}-{sample.label}")


@pytest.mark.slow
@pytest.mark.parametrize("fn", [*_one_op_kernels(), *_one_op_kernels(loaded=True)])
def test_every_op_rule_lowers_through_triton_or_is_refused_as_jax_would_fail(fn):
    """Issue 27 done-when: every op's Pallas rule lowers for CUDA with Triton, on its
    parameters' Refs and on values in registers. The one refusal left is a sample whose block
    is not a power of two (Triton's arrays are), and it holds: the same kernel lowered without
    the checks fails in jax. (Every op has samples that lower: `test_every_op_lowers_somewhere`.)"""
    try:
        text = lower_for_cuda(fn, *_zeros(fn))
    except UnsupportedError as refused:
        assert "Triton needs power-of-two blocks" in refused.message, refused.message
        with pytest.raises(Exception):  # noqa: B017 - jax fails with several exception types
            _raw_lowering(fn, _zeros(fn), Triton())
        return
    assert text.count(f"@{Triton.custom_call}") == 1


@pytest.mark.slow
def test_every_op_with_a_pallas_rule_lowers_through_triton_on_some_sample():
    """No op is left with only refused samples: each lowers on at least one of its own."""
    lowered, refused = set(), set()
    for param in _one_op_kernels(loaded=True):
        op = param.id.split("-")[0]
        try:
            lower_for_cuda(param.values[0], *_zeros(param.values[0]))
            lowered.add(op)
        except UnsupportedError:
            refused.add(op)
    assert sorted(refused - lowered) == []


def test_a_kernel_matmul_asks_for_full_f32_precision():
    """jax's Triton lowering reads a dot of DEFAULT precision as TF32 inputs (10-bit mantissas),
    which the reference never rounds to; every dot of a kernel asks for HIGHEST (IEEE f32)."""
    fn = _example("flash_attention")
    jaxpr = lower_pallas(fn, *_zeros(fn)).jaxpr()
    dots = re.findall(r"dot_general\[.*?precision=(\S+, \S+)", jaxpr, flags=re.S)
    assert len(dots) == 2, jaxpr  # scores = q k^T and p v
    assert set(dots) == {"(Precision.HIGHEST, Precision.HIGHEST)"}


@func
def rounded(x: Tensor[(32,), "f32"]):
    return tf.round(x), tf.round_half_away(x)


def test_rounding_through_floor_is_stablehlos_rounding_on_ties_zeros_and_specials():
    """The kernel rounds through floor (Triton has no `round`); on ties, signed zeros, huge,
    infinite and NaN inputs it equals numpy's rint (ties to even) and round-half-away-from-zero
    (hir §1.3's two rounding kinds), sign of zero included, and it lowers through Triton."""
    values = [-2.5, -1.5, -0.5, -0.3, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 3.4999998, 8388607.5,
              0.49999997, -7.5, 1e30, -1e30, np.inf, -np.inf, np.nan]  # fmt: skip
    x = np.array(values + [0.75] * (32 - len(values)), np.float32)
    even, away = run_pallas(rounded, x, interpret=True)
    magnitude = np.abs(x.astype(np.float64))
    half_away = np.copysign(np.floor(magnitude) + (magnitude - np.floor(magnitude) >= 0.5), x)
    for got, want in ((even, np.rint(x)), (away, np.where(np.isfinite(x), half_away, x))):
        np.testing.assert_array_equal(got, want.astype(np.float32))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    assert f"@{Triton.custom_call}" in lower_for_cuda(rounded, x)
