# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The indexing ops' GPU forms (issue 27): what a kernel traced for Triton computes, run on CPU.

jax 0.10.2's Pallas -> Triton lowering has no gather, slice, rev, pad, dynamic_slice or
dynamic_update_slice of a value, and joins only pairs of pieces, so on the GPU path
(`KernelNamespace.gpu`) the rules read through `kx` forms it does lower: loads of a Ref, equal
splits and stacks, and selections (`kx.pick`). `run_pallas(..., interpret=True,
gpu_backend="triton")` executes exactly those forms on the CPU. Each op, reading its operands
from gmem Refs and as values in registers (each operand cast first), must equal the reference
evaluator bit for bit on data holding -0.0, infinities and NaN (the forms select, they never
compute), and lower for CUDA to one Triton kernel.
"""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilefoundry import Tensor, func
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.ir.types import DType, TensorType
from tilefoundry.passes import compile, verify

pytest.importorskip("jax", reason="the Pallas exit needs jax")

from tilefoundry.exits.pallas import Triton, lower_for_cuda, run_pallas
from tilefoundry.exits.pallas.gpu import GPU_REGISTER_ELEMENTS
from tilefoundry.ir.core import Call, Var, source_span
from tilefoundry.ir.core import Tuple as TupleExpr
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.nn.rope import RoPE
from tilefoundry.ir.hir.tensor.blocked_window import BlockedDynamicSlice, BlockedDynamicUpdateSlice
from tilefoundry.ir.hir.tensor.cache_update import CacheUpdate
from tilefoundry.ir.hir.tensor.cast import Cast
from tilefoundry.ir.hir.tensor.concat import Concat, Stack
from tilefoundry.ir.hir.tensor.dynamic_slice import DynamicSlice
from tilefoundry.ir.hir.tensor.dynamic_update_slice import DynamicUpdateSlice
from tilefoundry.ir.hir.tensor.gather import Gather
from tilefoundry.ir.hir.tensor.insert_slice import InsertSlice
from tilefoundry.ir.hir.tensor.pad import Pad
from tilefoundry.ir.hir.tensor.reverse import Reverse
from tilefoundry.ir.hir.tensor.slice import Slice

SPECIALS = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan], np.float32)


def data(shape, dtype: str, seed: int) -> np.ndarray:
    """Random values of `dtype`; floats hold -0.0, 0.0, +-inf and NaN at random places."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("i"):
        return rng.integers(-1000, 1000, shape).astype(DType.from_name(dtype).to_numpy())
    values = rng.standard_normal(shape).astype(np.float32) * 100
    special = rng.random(shape) < 0.3
    values[special] = rng.choice(SPECIALS, int(special.sum()))
    return values.astype(DType.from_name(dtype).to_numpy())


def scalar(value: int) -> tuple:
    return ((), "i32", np.int32(value))


def indices(shape, bound: int, seed: int) -> tuple:
    return (shape, "i32", np.random.default_rng(seed).integers(0, bound, shape).astype(np.int32))


def tensor(shape, dtype: str = "f32") -> tuple:
    return (shape, dtype, None)


# One row per op: the op, its operands (shape, dtype, a fixed array or None for `data`; a list
# of them is a tuple operand), power-of-two shapes throughout (Triton's), every window start or
# count a runtime parameter.
CASES = {
    "DynamicSlice-cols": (DynamicSlice(axis=1, size=4), [tensor((8, 8)), scalar(3)]),
    "DynamicSlice-rows-clamped": (
        DynamicSlice(axis=0, size=2, scale=2, offset=1),
        [tensor((8, 4), "bf16"), scalar(5)],
    ),
    "DynamicUpdateSlice": (
        DynamicUpdateSlice(axis=1),
        [tensor((8, 8)), tensor((8, 4)), scalar(3)],
    ),
    "DynamicUpdateSlice-i32": (
        DynamicUpdateSlice(axis=0),
        [tensor((8, 4), "i32"), tensor((2, 4), "i32"), scalar(7)],
    ),
    "BlockedDynamicSlice": (
        BlockedDynamicSlice(axis=0, blocks=4, size=1),
        [tensor((8, 4)), scalar(1)],
    ),
    "BlockedDynamicSlice-scaled": (
        BlockedDynamicSlice(axis=1, blocks=2, size=2, scale=2),
        [tensor((4, 8), "f16"), scalar(1)],
    ),
    "BlockedDynamicUpdateSlice": (
        BlockedDynamicUpdateSlice(axis=1, blocks=2),
        [tensor((4, 8)), tensor((4, 4)), scalar(1)],
    ),
    "Slice-rows": (Slice(begin=(0, 0), end=(4, 8)), [tensor((8, 8))]),
    "Slice-unaligned": (Slice(begin=(3, 0), end=(5, 8)), [tensor((8, 8))]),
    "Slice-stride-2": (Slice(begin=(1, 0), end=(8, 8), strides=(2, 1)), [tensor((8, 8))]),
    "Slice-stride-3-squeezed": (
        Slice(begin=(0, 2), end=(4, 3), strides=(3, 1), squeeze_axes=(1,)),
        [tensor((8, 4), "bool")],
    ),
    "Reverse": (Reverse(axes=(1,)), [tensor((4, 8))]),
    "Reverse-two-axes-bool": (Reverse(axes=(0, -1)), [tensor((4, 2, 8), "bool")]),
    "Concat-axis-0": (Concat(axis=0), [[tensor((4, 8)), tensor((4, 8))]]),
    "Concat-four-axis-1": (Concat(axis=1), [[tensor((4, 2), "i32") for _ in range(4)]]),
    "Concat-unequal": (Concat(axis=1), [[tensor((4, 2)), tensor((4, 4)), tensor((4, 2))]]),
    "Stack-axis-0": (Stack(axis=0), [[tensor((4, 8)), tensor((4, 8))]]),
    "Stack-four-axis-1": (Stack(axis=1), [[tensor((2, 4), "bf16") for _ in range(4)]]),
    "CacheUpdate": (
        CacheUpdate(),
        [tensor((2, 8, 2, 4)), scalar(2), scalar(3), tensor((2, 4, 2, 4))],
    ),
    "Gather-axis-0": (Gather(axis=0), [tensor((8, 4)), indices((4,), 8, 1)]),
    "Gather-axis-1": (Gather(axis=1), [tensor((4, 8), "bf16"), indices((4, 4), 8, 2)]),
    "Gather-batched": (Gather(axis=1, batch_dims=1), [tensor((4, 8)), indices((4, 4), 8, 3)]),
    "Gather-batched-carried": (
        Gather(axis=1, batch_dims=1),
        [tensor((4, 8, 4)), indices((4, 2), 8, 4)],
    ),
    "InsertSlice": (
        InsertSlice(),
        [tensor((8, 8)), tensor((4, 8)), [scalar(4), scalar(0)]],
    ),
    "Pad-edges": (Pad(low=(0, 1), high=(0, 3)), [tensor((4, 4))]),
    "Pad-value-i32": (Pad(low=(2, 0), high=(2, 0), value=7), [tensor((4, 4), "i32")]),
    "Pad-interior-negative-edge": (
        Pad(low=(0, -1), high=(0, 2), interior=(0, 1), value=-2.0),
        [tensor((4, 4))],
    ),
    "RoPE": (
        RoPE(),
        [tensor((2, 4, 8)), tensor((2, 4, 8)), tensor((8, 8)), tensor((8, 8)), indices((4,), 8, 5)],
    ),
}


def _kernel(name: str, op, operands, loaded: bool) -> tuple[Function, list[np.ndarray]]:
    """`op` on gmem parameters; `loaded`: every operand cast (to its own dtype) first, so the op
    reads values in registers, not its parameters' Refs."""
    params, arrays, args = [], [], []

    def leaf(spec) -> Call | Var:
        shape, dtype, fixed = spec
        param = Var(f"x{len(params)}", TensorType(shape, DType.from_name(dtype)))
        params.append(param)
        arrays.append(data(shape, dtype, seed=len(params)) if fixed is None else fixed)
        return Call(Cast(dtype=param.type.dtype), (param,)) if loaded else param

    for operand in operands:
        if isinstance(operand, list):
            args.append(TupleExpr(tuple(leaf(spec) for spec in operand)))
        else:
            args.append(leaf(operand))
    body = Call(op, tuple(args))
    return Function(name, tuple(params), body, TypeInferContext().infer(body)), arrays


def _assert_same(got, want) -> None:
    """Equal bit for bit where the op only moves values: NaN where NaN, the sign of every zero."""
    for g, w in zip(got, want, strict=True) if isinstance(want, tuple) else ((got, want),):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if g.dtype.kind == "f" or g.dtype.name == "bfloat16":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


@pytest.mark.parametrize("loaded", [False, True], ids=["refs", "values"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_gpu_form_equals_the_reference_and_lowers_to_one_triton_kernel(case, loaded):
    fn, arrays = _kernel(case.replace("-", "_"), *CASES[case], loaded)
    got = run_pallas(fn, *arrays, interpret=True, gpu_backend="triton")
    want = evaluate(fn, *arrays)
    if case == "RoPE":  # it computes x * cos + rotate_half(x) * sin in f32
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-5, equal_nan=True)
    else:
        _assert_same(got, want)
    text = lower_for_cuda(fn, *arrays)
    assert text.count(f"@{Triton.custom_call}") == 1
    assert "maxnumf" not in text  # Triton's float max, which drops a NaN: no selection uses it


@pytest.mark.parametrize(
    "case, loaded",
    [("Reverse", True), ("Concat-four-axis-1", True), ("Slice-stride-2", True), ("RoPE", False)],
)
def test_equal_pieces_are_cut_and_joined_with_no_selection(case, loaded):
    """A reversal, an equal concatenation and an aligned strided slice of a value are splits and
    stacks (no arithmetic: no selection's sum); so is RoPE's rotate-half, whose cos / sin rows
    are gather-loads of the caches' Refs."""
    import jax

    from tilefoundry.exits.pallas import lower_pallas

    fn, arrays = _kernel(case.replace("-", "_"), *CASES[case], loaded)
    kernel = lower_pallas(fn, *arrays)
    jaxpr = str(jax.make_jaxpr(kernel.call(interpret=True, gpu=True))(*kernel.input_structs()))
    assert "reduce_sum" not in jaxpr
    assert "split[" in jaxpr or "stack[" in jaxpr


WINDOWED = {
    "DynamicSlice-rows-clamped": 1,
    "DynamicUpdateSlice-i32": 2,
    "BlockedDynamicSlice-scaled": 1,
    "BlockedDynamicUpdateSlice": 2,
}
"""Ops with one runtime window start (the operand index of the start)."""


@functools.cache
def _windowed_kernel(case: str):
    return _kernel(case.replace("-", "_"), *CASES[case], loaded=True)


@settings(max_examples=40, deadline=None)
@given(
    case=st.sampled_from(sorted(WINDOWED)),
    start=st.integers(-3, 12),
    seed=st.integers(0, 2**16),
)
def test_every_window_start_clamps_as_the_reference_on_values(case, start, seed):
    """Any start, in range or not (clamped into the axis as StableHLO clamps it), on new data:
    the kernel is traced once per case, the start and the data are its runtime inputs."""
    fn, arrays = _windowed_kernel(case)
    rng = np.random.default_rng(seed)
    arrays = [
        np.int32(start)
        if index == WINDOWED[case]
        else data(a.shape, p.type.dtype.name, int(rng.integers(2**16)))
        for index, (a, p) in enumerate(zip(arrays, fn.params, strict=True))
    ]
    got = run_pallas(fn, *arrays, interpret=True, gpu_backend="triton")
    _assert_same(got, evaluate(fn, *arrays))


# -- a kernel the way a user writes it ------------------------------------------------------


@func
def tile_shuffle(x: Tensor[(16, 16), "f32"], y: Tensor[(16, 16), "f32"], at: Tensor[(), "i32"]):
    """Computed tiles cut, joined, reversed and windowed in registers (one CTA: Concat has no
    rule for operands split over a cta mesh)."""
    a, b = tf.exp(x), y * 2.0
    left, right = a[:, 0:8], b[:, 8:16]
    joined = tf.concat((right, left), axis=1)
    window = tf.dynamic_slice(tf.reverse(joined, (1,)), at, axis=1, size=8)
    return tf.concat((window, tf.reverse(a[:, 4:12], (1,))), axis=1) - b


SEQ, HEAD = 16, 16


@func
def roped_attention(
    q: Tensor[(SEQ, HEAD), "f32"],
    k: Tensor[(SEQ, HEAD), "f32"],
    v: Tensor[(SEQ, HEAD), "f32"],
    cos: Tensor[(32, HEAD), "f32"],
    sin: Tensor[(32, HEAD), "f32"],
    pos: Tensor[(SEQ,), "i32"],
):
    """One attention tile with rotary positions: softmax(rope(q) rope(k)^T / 4) v."""
    qr, kr = tf.rope(q, k, cos, sin, pos)
    scores = (qr @ tf.transpose(kr, (1, 0))) * 0.25
    p = tf.exp(scores - tf.reduce(scores, axes=(1,), keepdim=True, kind="max"))
    return (p / tf.reduce(p, axes=(1,), keepdim=True, kind="sum")) @ v


def _tile_shuffle_numpy(x, y, at):
    a, b = np.exp(x.astype(np.float64)), y.astype(np.float64) * 2
    joined = np.concatenate((b[:, 8:16], a[:, 0:8]), axis=1)[:, ::-1]
    start = min(max(int(at), 0), 8)
    return np.concatenate((joined[:, start : start + 8], a[:, 4:12][:, ::-1]), axis=1) - b


def _rope_numpy(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate((-x[:, half:], x[:, :half]), axis=1) * sin


def _attention_numpy(q, k, v, cos_cache, sin_cache, pos):
    cos, sin = cos_cache[pos].astype(np.float64), sin_cache[pos].astype(np.float64)
    qr, kr = (_rope_numpy(x.astype(np.float64), cos, sin) for x in (q, k))
    scores = qr @ kr.T * 0.25
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True) @ v.astype(np.float64)


@pytest.mark.parametrize("fused", [False, True], ids=["as-written", "compiled"])
def test_a_tile_program_that_cuts_joins_and_reverses_computed_tiles(fused):
    rng = np.random.default_rng(27)
    x, y = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    verify(tile_shuffle)
    fn = compile(tile_shuffle)[0] if fused else tile_shuffle
    for at in (3, 11):  # 11 is clamped to the last window, 8
        arrays = (x, y, np.int32(at))
        want = _tile_shuffle_numpy(*arrays)
        np.testing.assert_allclose(evaluate(fn, *arrays), want, rtol=1e-6, atol=1e-6)
        got = run_pallas(fn, *arrays, interpret=True, gpu_backend="triton")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert lower_for_cuda(fn, x, y, np.int32(3)).count(f"@{Triton.custom_call}") == 1


def test_a_roped_attention_tile():
    rng = np.random.default_rng(28)
    q, k, v = (rng.standard_normal((SEQ, HEAD)).astype(np.float32) for _ in range(3))
    angles = np.arange(32)[:, None] / 10.0 ** (np.arange(HEAD) % (HEAD // 2) / (HEAD // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    pos = rng.permutation(32)[:SEQ].astype(np.int32)
    arrays = (q, k, v, cos, sin, pos)
    verify(roped_attention)
    want = _attention_numpy(*arrays)
    np.testing.assert_allclose(evaluate(roped_attention, *arrays), want, rtol=1e-5, atol=1e-6)
    got = run_pallas(roped_attention, *arrays, interpret=True, gpu_backend="triton")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert lower_for_cuda(roped_attention, *arrays).count(f"@{Triton.custom_call}") == 1


# -- the bound on a selection ---------------------------------------------------------------


@func
def wide_window(x: Tensor[(64, 128), "f32"], at: Tensor[(), "i32"]):
    return tf.dynamic_slice(tf.exp(x), at, axis=1, size=64)


def test_a_selection_too_large_for_a_ctas_registers_is_refused_up_front_located():
    """A window of a value is selected from 64 x 64 results x 128 candidates each (2^19, over
    GPU_REGISTER_ELEMENTS): refused before lowering, at the op's line, with the fix."""
    arrays = (np.zeros((64, 128), np.float32), np.int32(0))
    assert GPU_REGISTER_ELEMENTS < 64 * 64 * 128
    message = r"DynamicSlice: on a GPU backend a selection .*\(524288 elements\).*smaller tiles"
    with pytest.raises(UnsupportedError, match=message) as refused:
        lower_for_cuda(wide_window, *arrays)
    location = refused.value.location
    assert (location.file, location.line) == (__file__, source_span(wide_window.body).line)
    with pytest.raises(UnsupportedError, match="run the program on XLA"):
        run_pallas(wide_window, *arrays, interpret=True, gpu_backend="triton")
    np.testing.assert_array_equal(  # interpreted without a backend: jax's dynamic_slice
        run_pallas(wide_window, *arrays, interpret=True), np.ones((64, 64), np.float32)
    )
