# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""The GPU forms of Conv2D, Cumulative, MatMul and erf (issue 27 items 3-4).

jax 0.10.2's Pallas -> Triton lowering has no convolution, no cumprod / cummax / cummin / reverse
cumsum, no erf, and a dot only of two 2-D tiles of 16 or more along each dim. On a GPU backend
(`KernelNamespace.gpu`) these ops' rules write forms from what it has; interpreted with
`gpu_backend="triton"` a CPU runs exactly those forms, so each is held here to the oracle (the
reference evaluator) or to float64 numpy / math.erf, and to `lower_for_cuda` giving one Triton
custom call — with the op reading its parameters ("refs") and values computed in the kernel
("values", each operand cast first).

Tolerances: max, min, integers and selections are exact. An f32 sum or product of n terms taken
in another order than the oracle's is off from it by at most 2 n u sum|term| (u = 2^-24, the
unit roundoff; each of the two computations within n u of the exact value), the bound used.
"""

import math
import re

import jax
import numpy as np
import pytest

from tilefoundry import Tensor, func
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.errors import UnsupportedError
from tilefoundry.evaluator import evaluate
from tilefoundry.exits.pallas import Triton, lower_for_cuda, lower_pallas, run_pallas
from tilefoundry.exits.pallas.gpu import GPU_REGISTER_ELEMENTS
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.math.unary import Unary, UnaryKind
from tilefoundry.ir.hir.nn.conv2d import Conv2D
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.tensor.cast import Cast
from tilefoundry.ir.hir.tensor.cumulative import Cumulative, CumulativeKind
from tilefoundry.ir.types import DType, TensorType
from tilefoundry.ir.types.shard import make_mesh
from tilefoundry.ir.types.shard.sugar import layout_from_sugar
from tilefoundry.passes import compile, verify

UNIT_ROUNDOFF = 2.0**-24
CTAS = make_mesh((2,), ("r",), topology="cta")
WHERE = pytest.mark.parametrize("loaded", [False, True], ids=["refs", "values"])


def _one_call(op, *types: TensorType, loaded: bool, cast: tuple[int, ...] = ()) -> Function:
    """`op` on parameters of `types`; `loaded`: each through a Cast first, so the op reads
    values in registers (`cast`: only the operands at these positions)."""
    params = tuple(Var(f"x{i}", t) for i, t in enumerate(types))
    args = tuple(
        Call(Cast(dtype=t.dtype), (p,)) if loaded or i in cast else p
        for i, (p, t) in enumerate(zip(params, types, strict=True))
    )
    call = Call(op, args)
    return Function(type(op).__name__, params, call, TypeInferContext().infer(call))


def _type(shape, dtype: str = "f32") -> TensorType:
    return TensorType(tuple(shape), DType.from_name(dtype))


def _arrays(rng, fn: Function) -> list[np.ndarray]:
    """Unit normals for floats, small integers (their products wrap, exactly as the oracle's)."""
    out = []
    for p in fn.params:
        shape, dtype = p.type.shape, p.type.dtype.to_numpy()
        if np.issubdtype(dtype, np.floating):
            out.append(rng.standard_normal(shape).astype(dtype))
        else:
            low = 0 if np.issubdtype(dtype, np.unsignedinteger) else -5
            out.append(rng.integers(low, 6, shape).astype(dtype))
    return out


def _on_gpu(fn, *arrays) -> np.ndarray:
    """The kernel run interpreted in its Triton form; it must also lower for cuda to one Triton
    custom call."""
    got = run_pallas(fn, *arrays, interpret=True, gpu_backend="triton")
    assert lower_for_cuda(fn, *arrays).count(f"@{Triton.custom_call}") == 1
    return got


def _gpu_jaxpr(fn, *arrays) -> str:
    kernel = lower_pallas(fn, *arrays)
    return str(jax.make_jaxpr(kernel.call(interpret=True, gpu=True))(*kernel.input_structs()))


def _assert_within_rounding(got, want, magnitude, terms: int):
    """|got - want| <= 2 n u magnitude (module docstring), NaNs in the same places."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    error = np.abs(got - want)[finite]
    bound = 2 * terms * UNIT_ROUNDOFF * np.asarray(magnitude, np.float64)[finite]
    assert np.all(error <= bound), (
        f"max error {error.max()}, over the bound by {(error - bound).max()}"
    )


# erf -------------------------------------------------------------------------------------------


@func
def erf_of(x: Tensor[(1 << 20,), "f32"]):
    return tf.erf(x)


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 0.5, 1.0, -1.0, 3.9999998, 4.0, 1e30]


def test_erf_on_a_gpu_backend_is_accurate_to_f32_against_math_erf():
    """hir §1.3 Unary erf on 2^20 points (dense on [-6, 6], geometric from 1e-40 to 1e-3, the
    specials): within 1.3e-7 absolutely and 1.8e-7 relatively (2.3 ulp at most) of math.erf
    in float64 wherever the result is a normal f32; subnormal inputs flush to zero (as lax.erf's
    do on XLA's CPU); erf(+-inf) = +-1, NaN stays NaN, -0.0 stays -0.0, and erf is odd exactly."""
    specials = np.array(SPECIALS, np.float32)
    tiny = np.geomspace(1e-40, 1e-3, 4096).astype(np.float32)
    dense = np.linspace(-6, 6, (1 << 20) - 2 * 4096 - len(specials), dtype=np.float32)
    x = np.concatenate([specials, dense, tiny, -tiny])
    got = run_pallas(erf_of, x, interpret=True, gpu_backend="triton").astype(np.float64)
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    normal = np.abs(x) >= np.finfo(np.float32).tiny
    error = np.abs(got - want)[normal]
    assert error.max() <= 1.3e-7
    assert (error / np.abs(want[normal])).max() <= 1.8e-7
    assert np.all(got[np.abs(x) < np.finfo(np.float32).tiny] == 0)
    head = got[: len(specials)]
    np.testing.assert_array_equal(head[:5], [0.0, -0.0, 1.0, -1.0, np.nan])
    assert np.signbit(head[1]) and not np.signbit(head[0])
    np.testing.assert_array_equal(
        run_pallas(erf_of, -x, interpret=True, gpu_backend="triton"), -got
    )


@WHERE
def test_erf_lowers_through_triton_and_equals_the_oracle(loaded):
    fn = _one_call(Unary(kind=UnaryKind.ERF), _type((8, 128)), loaded=loaded)
    (x,) = _arrays(np.random.default_rng(1), fn)
    got = _on_gpu(fn, x * 3)
    np.testing.assert_allclose(got, evaluate(fn, x * 3), rtol=1.8e-7, atol=1.3e-7)


# Cumulative ------------------------------------------------------------------------------------

CUMULATIVE = [
    *[(k, r, a, "f32") for k in CumulativeKind for r in (False, True) for a in (0, 1, 2)],
    *[(k, r, 1, "i32") for k in CumulativeKind for r in (False, True)],
]


def _scan_of_magnitudes(x, axis, kind, reverse):
    """The float64 running sum (product) of |x|: the magnitude of each output's terms."""
    a = np.abs(x.astype(np.float64))
    a = np.flip(a, axis) if reverse else a
    out = np.cumprod(a, axis) if kind is CumulativeKind.PROD else np.cumsum(a, axis)
    return np.flip(out, axis) if reverse else out


@WHERE
@pytest.mark.parametrize(
    ("kind", "reverse", "axis", "dtype"),
    CUMULATIVE,
    ids=[f"{k.value}-{'rev' if r else 'fwd'}-axis{a}-{d}" for k, r, a, d in CUMULATIVE],
)
def test_cumulative_on_a_gpu_backend_equals_the_oracle(kind, reverse, axis, dtype, loaded):
    """Cumulative (numpy cumsum / cumprod / maximum.accumulate / minimum.accumulate), every
    kind both ways along every axis: max / min exactly (a NaN reached makes the running value
    NaN, as numpy's accumulate), integers exactly (wrapping), an f32 sum or product within the
    rounding of n reordered terms."""
    fn = _one_call(Cumulative(axis=axis, kind=kind, reverse=reverse), _type((4, 8, 2), dtype),
                   loaded=loaded)  # fmt: skip
    (x,) = _arrays(np.random.default_rng(2), fn)
    if dtype == "f32":
        x[1, 2, 1] = np.nan
    got, want = _on_gpu(fn, x), evaluate(fn, x)
    if dtype != "f32" or kind in (CumulativeKind.MAX, CumulativeKind.MIN):
        np.testing.assert_array_equal(got, want)
    else:
        magnitude = _scan_of_magnitudes(x, axis, kind, reverse)
        _assert_within_rounding(got, want, magnitude, x.shape[axis])


def test_only_a_forward_cumsum_stays_a_scan_on_the_gpu():
    """Triton lowers `cumsum` forward only (tt.scan); every other scan is the pairwise form."""
    x = np.zeros((4, 8), np.float32)
    for kind in CumulativeKind:
        for reverse in (False, True):
            fn = _one_call(Cumulative(axis=1, kind=kind, reverse=reverse), _type((4, 8)),
                           loaded=False)  # fmt: skip
            scans = _gpu_jaxpr(fn, x).count("cum")
            assert scans == (kind is CumulativeKind.SUM and not reverse), (kind, reverse)


# MatMul ----------------------------------------------------------------------------------------

MATMULS = [
    ((4, 8), (8, 4), "f32"),
    ((4, 4, 8), (4, 8, 4), "f32"),
    ((4, 4, 8), (8, 4), "f32"),
    ((2, 1, 4, 8), (4, 8, 2), "f32"),
    ((8,), (8, 4), "f32"),
    ((4, 8), (8,), "f32"),
    ((8,), (8,), "f32"),
    ((32, 16), (16, 32), "f32"),
    ((2, 16, 16), (16, 32), "f32"),
    ((1, 16, 16), (1, 16, 16), "f32"),
    ((4, 4, 8), (4, 8, 4), "i32"),
    ((32, 16), (16, 32), "i32"),
    ((32, 16), (16, 32), "u32"),
    ((4, 8), (8, 4), "bf16"),
]


def _takes_a_dot(lhs, rhs, dtype) -> bool:
    """Triton's dot: two 2-D tiles (a rhs without batch takes the lhs batch as rows, a batch of
    one is dropped), each dim at least 16, not unsigned."""
    if len(lhs) < 2 or len(rhs) < 2 or dtype == "u32":
        return False
    batch = np.broadcast_shapes(lhs[:-2], rhs[:-2])
    if len(rhs) > 2 and math.prod(batch) != 1:
        return False
    rows = math.prod(lhs[:-1]) if len(rhs) == 2 else lhs[-2]
    return min(rows, lhs[-1], rhs[-1]) >= 16


@WHERE
@pytest.mark.parametrize(
    ("lhs", "rhs", "dtype"), MATMULS, ids=[f"{a}x{b}-{d}" for a, b, d in MATMULS]
)
def test_matmul_on_a_gpu_backend_equals_the_oracle(lhs, rhs, dtype, loaded):
    """hir §1.3 MatMul (torch matmul: batched, broadcast, 1-D promoted): a HIGHEST-precision dot
    where Triton takes one, else a multiply reduced over K in f32 — integers exactly, floats
    within the rounding of K reordered products (bf16: the oracle's f32 result rounded once to
    bf16, equal to it within one bf16 ulp)."""
    fn = _one_call(MatMul(), _type(lhs, dtype), _type(rhs, dtype), loaded=loaded)
    a, b = _arrays(np.random.default_rng(3), fn)
    got, want = _on_gpu(fn, a, b), evaluate(fn, a, b)
    if dtype in ("i32", "u32"):
        np.testing.assert_array_equal(got, want)
    elif dtype == "bf16":
        ulp = np.abs(want.astype(np.float64)) * 2.0**-7
        assert np.all(np.abs(got.astype(np.float64) - want) <= ulp)
    else:
        magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
        _assert_within_rounding(got, want, magnitude, lhs[-1])
    jaxpr = _gpu_jaxpr(fn, a, b)
    dots = re.findall(r"dot_general\[.*?precision=(\S+, \S+)", jaxpr, flags=re.S)
    assert len(dots) == _takes_a_dot(lhs, rhs, dtype)
    assert set(dots) <= {"(Precision.HIGHEST, Precision.HIGHEST)"}


# Conv2D ----------------------------------------------------------------------------------------

CONVS = [
    ((2, 4, 8, 8), (4, 4, 2, 2), {"stride": (2, 2)}),
    ((2, 4, 8, 8), (8, 4, 4, 4), {"padding": (1, 1), "stride": (2, 2)}),
    (
        (2, 4, 8, 8),
        (8, 2, 2, 2),
        {"groups": 2, "dilation": (2, 2), "padding": (1, 1), "stride": (2, 1)},
    ),
    ((2, 4, 8, 8), (4, 1, 4, 4), {"groups": 4, "stride": (4, 4)}),
    ((2, 4, 8, 8), (4, 4, 1, 1), {"padding": (4, 0), "stride": (2, 1)}),
    ((1, 16, 8, 8), (16, 16, 1, 1), {}),
    ((1, 16, 8, 8), (16, 16, 4, 4), {"padding": (1, 1), "stride": (2, 2)}),
]


@WHERE
@pytest.mark.parametrize(
    ("x", "w", "attrs"),
    CONVS,
    ids=[f"{x}-{w}-{','.join(f'{k}{v}' for k, v in a.items())}" for x, w, a in CONVS],
)
def test_conv2d_on_a_gpu_backend_equals_the_oracle(x, w, attrs, loaded):
    """hir §1.3 Conv2D (torch conv2d: strided, dilated, padded, grouped; power-of-two blocks,
    as Triton's arrays are): the taps' windows selected exactly, contracted in f32 within the
    rounding of the C/groups * kh * kw products and the bias; an infinity in x reaches exactly
    the outputs whose windows read it."""
    op = Conv2D(**attrs)
    fn = _one_call(op, _type(x), _type(w), _type(w[:1]), loaded=loaded)
    arrays = _arrays(np.random.default_rng(4), fn)
    arrays[0][0, 1, 2, 3] = np.inf
    got, want = _on_gpu(fn, *arrays), evaluate(fn, *arrays)
    magnitude = evaluate(_one_call(op, _type(x), _type(w), _type(w[:1]), loaded=False),
                         *(np.abs(a) for a in arrays))  # fmt: skip
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    _assert_within_rounding(got[finite], want[finite], magnitude[finite], w[1] * w[2] * w[3] + 1)


ODD_KERNELS = [
    ((2, 16, 8, 8), (16, 16, 3, 3), {"padding": (1, 1)}),
    ((2, 16, 8, 8), (16, 16, 3, 3), {"padding": (1, 1), "stride": (2, 2)}),
    ((2, 8, 8, 8), (8, 8, 5, 5), {"padding": (4, 4), "dilation": (2, 2)}),
    ((2, 16, 8, 8), (16, 4, 3, 3), {"padding": (1, 1), "groups": 4}),
]


def _over_ctas(type_: TensorType) -> TensorType:
    """`type_` with its first axis split over the CTAs (`CTAS`), as `N @ CTAS.r` declares."""
    shape, layout = layout_from_sugar((type_.shape[0] @ CTAS.r, *type_.shape[1:]))
    return TensorType(shape, type_.dtype, layout)


SPLITS = {"one-cta": (), "batch-over-ctas": (0,), "out-channels-over-ctas": (1, 2)}
"""Which operands (x, weight, bias) have their first axis split over the CTAs; output channels
only with one group (Conv2D's typing rule refuses them split with several)."""

ODD_CASES = [
    pytest.param(x, w, attrs, split, id=f"{w[2]}x{w[3]}-{attrs_id}-{split}")
    for x, w, attrs in ODD_KERNELS
    for attrs_id in [",".join(f"{k}{v}" for k, v in attrs.items())]
    for split in SPLITS
    if not (split == "out-channels-over-ctas" and attrs.get("groups", 1) > 1)
]


@pytest.mark.parametrize("x_loaded", [False, True], ids=["x-ref", "x-value"])
@pytest.mark.parametrize(("x", "w", "attrs", "split"), ODD_CASES)
def test_an_odd_kernel_reads_its_weights_tap_by_tap_on_a_gpu_backend(x, w, attrs, split, x_loaded):
    """hir §1.3 Conv2D with 3x3 / 5x5 kernels, whose weight block (O, C/groups, k, k) is no
    power of two: the weights stay a Ref and each tap's (O, C/groups) slice is loaded alone, so
    the kernel holds only power-of-two arrays and lowers to one Triton call; interpreted in that
    form it equals the oracle within the rounding of the C/groups * k * k products and the bias
    (the module docstring's bound), x read from its Ref or as a value, in one CTA or with the
    batch or the output channels over two."""
    op = Conv2D(**attrs)
    types = [_type(x), _type(w), _type(w[:1])]
    for index in SPLITS[split]:
        types[index] = _over_ctas(types[index])
    fn = _one_call(op, *types, loaded=False, cast=(0,) if x_loaded else ())
    arrays = _arrays(np.random.default_rng(6), fn)
    got, want = _on_gpu(fn, *arrays), evaluate(fn, *arrays)
    magnitude = evaluate(fn, *(np.abs(a) for a in arrays))
    _assert_within_rounding(got, want, magnitude, w[1] * w[2] * w[3] + 1)


REALISTIC_CONVS = {
    "3x3-pad1": ((2, 16, 32, 32), (16, 16, 3, 3), {"padding": (1, 1)}),
    "stride2": ((2, 16, 32, 32), (16, 16, 3, 3), {"padding": (1, 1), "stride": (2, 2)}),
    "dilation2": ((2, 16, 32, 32), (16, 16, 3, 3), {"padding": (2, 2), "dilation": (2, 2)}),
    # 32 channels, so each group's contraction is a Triton dot (16 or more along each dim);
    # stride 2, so the (1, 32, 16, 16) output per CTA stays within the registers too
    "groups2": (
        (2, 32, 32, 32),
        (32, 16, 3, 3),
        {"padding": (1, 1), "stride": (2, 2), "groups": 2},
    ),
}


def _kernel_equations(jaxpr):
    """Every equation of a kernel's jaxpr, nested ones (loop bodies, jitted functions) too."""
    from jax.extend.core import jaxprs_in_params

    for eqn in jaxpr.eqns:
        yield eqn
        for inner in jaxprs_in_params(eqn.params):
            yield from _kernel_equations(getattr(inner, "jaxpr", inner))


def _traced_kernel(fn, *arrays) -> list:
    """The equations of `fn`'s kernel as traced for a GPU backend."""
    kernel = lower_pallas(fn, *arrays)
    launch = jax.make_jaxpr(kernel.call(interpret=True, gpu=True))(*kernel.input_structs())
    (pallas,) = [e for e in launch.jaxpr.eqns if e.primitive.name == "pallas_call"]
    return list(_kernel_equations(pallas.params["jaxpr"]))


@pytest.mark.parametrize("case", sorted(REALISTIC_CONVS))
def test_a_realistic_conv_reads_x_tap_by_tap_from_its_ref_within_the_registers(case):
    """hir §1.3 Conv2D of a realistic size (16 or 32 channels, 32x32, the batch over two CTAs):
    each tap's window of x is one gather-load of x's Ref, zero in the padding, so no array of
    the traced kernel exceeds GPU_REGISTER_ELEMENTS (the selection from every input position,
    (1, 16, 32, 32, 32) per tap, would be 32 times over) and no sum runs over a 5-D selection;
    interpreted in that form it equals the oracle within the rounding of the C/groups * 9
    products and the bias (the module docstring's bound), and it lowers to one Triton call."""
    x, w, attrs = REALISTIC_CONVS[case]
    op = Conv2D(**attrs)
    fn = _one_call(op, _over_ctas(_type(x)), _type(w), _type(w[:1]), loaded=False)
    arrays = _arrays(np.random.default_rng(7), fn)
    equations = _traced_kernel(fn, *arrays)
    largest = max(int(np.prod(v.aval.shape)) for e in equations for v in e.outvars)
    assert largest <= GPU_REGISTER_ELEMENTS
    summed = [e.invars[0].aval.shape for e in equations if e.primitive.name == "reduce_sum"]
    assert all(len(shape) < 5 for shape in summed), summed
    got, want = _on_gpu(fn, *arrays), evaluate(fn, *arrays)
    magnitude = evaluate(fn, *(np.abs(a) for a in arrays))
    _assert_within_rounding(got, want, magnitude, w[1] * w[2] * w[3] + 1)


# Kernels written as a user writes them ---------------------------------------------------------


@func
def conv_block(
    x: Tensor[(4 @ CTAS.r, 16, 8, 8), "f32"],
    w: Tensor[(16, 16, 4, 4), "f32"],
    b: Tensor[(16,), "f32"],
):
    """A downsampling convolution with bias and exact (erf) GELU, batch over the CTAs."""
    y = tf.conv2d(x, w, b, stride=(2, 2), padding=(1, 1))
    return 0.5 * y * (1.0 + tf.erf(y * (1.0 / math.sqrt(2.0))))


def _conv_in_float64(x, w, b, stride: int, pad: int):
    """float64: zero-padded x, each (square) kernel window's product with the weights, plus the
    bias."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    k = w.shape[2]
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = (padded.shape[2] - k) // stride + 1
    y = np.zeros((x.shape[0], w.shape[0], out, out))
    for i in range(out):
        for j in range(out):
            window = padded[:, :, stride * i : stride * i + k, stride * j : stride * j + k]
            y[:, :, i, j] = np.einsum("nchw,ochw->no", window, w)
    return y + b.reshape(1, -1, 1, 1)


def _conv_block_in_numpy(x, w, b):
    y = _conv_in_float64(x, w, b, stride=2, pad=1)
    return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


@func
def cnn_layer(
    x: Tensor[(2 @ CTAS.r, 16, 32, 32), "f32"],
    w: Tensor[(16, 16, 3, 3), "f32"],
    b: Tensor[(16,), "f32"],
):
    """A CNN layer: a 3x3 convolution keeping the image size, its bias, ReLU."""
    return tf.relu(tf.conv2d(x, w, b, padding=(1, 1)))


def _cnn_layer_in_numpy(x, w, b):
    return np.maximum(_conv_in_float64(x, w, b, stride=1, pad=1), 0)


@func
def drawdown(prices: Tensor[(8 @ CTAS.r, 64), "f32"]):
    """How far each price is below its running peak, as a fraction of the peak."""
    peak = tf.cummax(prices, axis=1)
    return (peak - prices) / peak


def _drawdown_in_numpy(prices):
    peak = np.maximum.accumulate(prices.astype(np.float64), axis=1)
    return (peak - prices) / peak


USER_KERNELS = {
    # each output an f32 sum of 256 unit-normal products (16 channels x 16 taps) and the bias,
    # then GELU: rounding errors of about sqrt(256) u sum|term| (1e-6 of the outputs' unit
    # scale), 2e-5 with margin, relative and absolute (outputs near 0)
    "conv_block": (conv_block, _conv_block_in_numpy, 2e-5),
    # each output an f32 sum of 144 unit-normal products (16 channels x 9 taps) and the bias,
    # then ReLU (exact): errors of about sqrt(144) u sum|term|, 2e-5 with margin as above
    "cnn_layer": (cnn_layer, _cnn_layer_in_numpy, 2e-5),
    # the running max exact, then a subtraction and a division: a few u of the peak
    "drawdown": (drawdown, _drawdown_in_numpy, 1e-6),
}


@pytest.mark.parametrize("fused", [False, True], ids=["as-written", "compiled"])
@pytest.mark.parametrize("name", sorted(USER_KERNELS))
def test_a_user_kernel_checks_evaluates_runs_in_its_triton_form_and_lowers(name, fused):
    """conv + bias + erf GELU, and a running max, on a cta mesh: verified (`check`), equal to
    float64 numpy on the oracle and interpreted in the Triton form, lowered for cuda once."""
    fn, reference, rtol = USER_KERNELS[name]
    verify(fn)
    fn = compile(fn)[0] if fused else fn
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.params]
    if name == "drawdown":
        arrays[0] = np.abs(arrays[0]) + 1  # prices
    want = reference(*arrays)
    np.testing.assert_allclose(evaluate(fn, *arrays), want, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(_on_gpu(fn, *arrays), want, rtol=rtol, atol=rtol)


def test_the_warps_follow_a_gpu_forms_intermediate():
    """One warp per 256 elements of the largest array, a GPU form's included: drawdown's block
    is (4, 64) (1 warp by its values), its running max a (4, 64, 64) masked broadcast, so 8
    warps (64 of its elements a thread, GPU_REGISTER_ELEMENTS's arithmetic)."""
    text = lower_for_cuda(drawdown, np.ones((8, 64), np.float32))
    assert re.search(r"num_warps = 8 : i32", text)


# Refusals --------------------------------------------------------------------------------------


@func
def matrix_vector(a: Tensor[(16, 4096), "f32"], v: Tensor[(4096,), "f32"]):
    return a @ v


@func
def long_running_max(x: Tensor[(4, 128), "f32"]):
    return tf.cummax(x, axis=1)


@func
def wide_conv(x: Tensor[(4, 16, 16, 16), "f32"], w: Tensor[(16, 16, 2, 2), "f32"],
              b: Tensor[(16,), "f32"]):  # fmt: skip
    """x computed in the kernel (a value), so its taps' windows are selections: from its Ref
    they would be gather-loads, which `test_a_realistic_conv_reads_x_tap_by_tap...` holds."""
    return tf.conv2d(x * 2.0, w, b, stride=(2, 2))


REFUSALS = {
    "matrix_vector": (
        matrix_vector,
        "a @ v",
        r"MatMul: on a GPU backend a matmul of \(16, 4096\) x \(4096, 1\) as a multiply reduced "
        r"over K .* \(16, 4096, 1\) intermediate \(65536 elements\), more than the 16384 a CTA "
        r"keeps in registers; give each CTA a 2-D matmul of 16 or more along every dim",
    ),
    "long_running_max": (
        long_running_max,
        "tf.cummax(x, axis=1)",
        r"Cumulative: on a GPU backend the running max as a masked reduction of every pair of "
        r"positions is a \(4, 128, 128\) intermediate .*; scan a shorter block per CTA",
    ),
    "wide_conv": (
        wide_conv,
        "tf.conv2d(x * 2.0, w, b, stride=(2, 2))",
        r"Conv2D: on a GPU backend a tap's input window along axis 2 .* \(4, 16, 8, 16, 16\) "
        r"intermediate \(131072 elements\).*; convolve a smaller block per CTA",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_a_gpu_form_beyond_the_registers_is_refused_up_front_located(name):
    """DESIGN §1: refused before lowering, at the op's line, naming the bound and the fix; the
    same kernel interpreted without a backend still runs (the bound is the GPU's)."""
    fn, line, message = REFUSALS[name]
    arrays = [np.ones(p.type.shape, np.float32) for p in fn.params]
    with open(__file__) as this:
        source = this.read().splitlines()
    for attempt in (
        lambda: lower_for_cuda(fn, *arrays),
        lambda: run_pallas(fn, *arrays, interpret=True, gpu_backend="triton"),
    ):
        with pytest.raises(UnsupportedError, match=message) as refused:
            attempt()
        assert refused.value.location.file == __file__
        assert line in source[refused.value.location.line - 1]
    np.testing.assert_allclose(run_pallas(fn, *arrays, interpret=True), evaluate(fn, *arrays))


@func
def scaled_filters(x: Tensor[(2, 16, 8, 8), "f32"],
                   w: Tensor[(16, 16, 3, 3), "f32"],
                   b: Tensor[(16,), "f32"]):  # fmt: skip
    return tf.conv2d(x, w * 2.0, b, padding=(1, 1))


@func
def half_the_filters(x: Tensor[(2, 16, 8, 8), "f32"], w: Tensor[(16, 16, 3, 3), "f32"],
                     b: Tensor[(8,), "f32"]):  # fmt: skip
    return tf.conv2d(x, w[:8], b, padding=(1, 1))


@func
def flipped_filters(x: Tensor[(2, 16, 8, 8), "f32"], w: Tensor[(16, 16, 3, 3), "f32"],
                    b: Tensor[(16,), "f32"]):  # fmt: skip
    return tf.conv2d(x, tf.reverse(w, axes=(2,)), b, padding=(1, 1))


ODD_BLOCK_REFUSALS = {
    # the multiply loads w whole: the preflight refuses its block, at the parameter
    "scaled_filters": (
        scaled_filters,
        'w: Tensor[(16, 16, 3, 3), "f32"]',
        r"Function scaled_filters: the block of parameter 'w' is \(16, 16, 3, 3\) per CTA: 3 "
        r"along axis 2; Triton needs power-of-two blocks; use 2 or 4",
    ),
    # the slice reads w through its Ref, but its window is no power of two: the traced check
    # refuses the load, at the slice, naming the parameter as the preflight would
    "half_the_filters": (
        half_the_filters,
        "tf.conv2d(x, w[:8], b, padding=(1, 1))",
        r"Slice: Triton cannot lower a load of the block of parameter 'w' as a \(8, 16, 3, 3\) "
        r"array \(3 along axis 2; Triton needs power-of-two blocks, as its arrays are: use 2 or "
        r"4\) .*; read parameter 'w' in power-of-two windows \(a slice, or a convolution's taps",
    ),
    # the reversal gather-loads w through its Ref at positions of w's odd shape: the traced
    # check refuses the first odd array, naming the block the op reads
    "flipped_filters": (
        flipped_filters,
        "tf.conv2d(x, tf.reverse(w, axes=(2,)), b, padding=(1, 1))",
        r"Reverse: Triton cannot lower `iota` of a \(1, 1, 3, 1\) array, reading the block of "
        r"parameter 'w', \(16, 16, 3, 3\) per CTA \(3 along axis 2; Triton needs power-of-two "
        r"blocks",
    ),
}


@pytest.mark.parametrize("name", sorted(ODD_BLOCK_REFUSALS))
def test_an_odd_weight_array_in_the_kernel_is_refused_up_front_as_jax_would_fail(name):
    """DESIGN §1: a weight block that is no power of two, loaded whole (the preflight) or read
    by a Ref reader into an array that is no power of two (the traced check), is refused before
    lowering, located, naming the parameter and the fix; the same kernel lowered without the
    checks fails in jax (the refusal is the truth), and interpreted without a backend it runs."""
    fn, line, message = ODD_BLOCK_REFUSALS[name]
    arrays = [np.ones(p.type.shape, np.float32) for p in fn.params]
    with pytest.raises(UnsupportedError, match=message) as refused:
        lower_for_cuda(fn, *arrays)
    with open(__file__) as this:
        assert line in this.read().splitlines()[refused.value.location.line - 1]
    kernel = lower_pallas(fn, *arrays)
    call = kernel.call(interpret=False, compiler_params=Triton(1, 1).compiler_params(None))
    with pytest.raises(Exception):  # noqa: B017 - jax fails with several exception types
        jax.jit(call).trace(*kernel.input_structs()).lower(lowering_platforms=("cuda",))
    np.testing.assert_allclose(run_pallas(fn, *arrays, interpret=True), evaluate(fn, *arrays))
