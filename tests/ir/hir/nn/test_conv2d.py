"""Conv2D: typeinfer case tables (shapes, attributes, sharding, Partials) and the kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.nn.conv2d import Conv2D
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Partial, Split, make_mesh
from tilefoundry.rules import EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
H = DimVar("H", 3, 512)
B_ = Broadcast()
PSUM = Partial("sum")

X = (4, 8, 10, 10)
W = (16, 8, 3, 3)
BIAS = (16,)
OUT = (4, 16, 8, 8)


t = make_tensor_type  # the shorthand the case tables use


def s(shape, *attrs):
    mesh = M1 if len(attrs) == 1 else M2
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def check(op, args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, *args)
    else:
        assert typeinfer_call(op, *args) == expected


SHAPES = [
    # torch conv2d: out = (H + 2p - d(k - 1) - 1) // s + 1 per spatial axis
    (Conv2D(), (t(X), t(W), t(BIAS)), t(OUT)),
    (Conv2D(stride=2, padding=1), (t(X), t(W), t(BIAS)), t((4, 16, 5, 5))),
    (Conv2D(stride=(1, 3), dilation=(2, 1)), (t(X), t(W), t(BIAS)), t((4, 16, 6, 3))),
    (Conv2D(groups=2), (t(X), t((16, 4, 3, 3)), t(BIAS)), t(OUT)),
    (Conv2D(groups=8), (t(X), t((8, 1, 1, 1)), t((8,))), t((4, 8, 10, 10))),
    (Conv2D(), (t((N, 8, H, 10)), t(W), t(BIAS)), t((N, 16, H - 2, 8))),
    (
        Conv2D(),
        (t(X, bf16, "smem"), t(W, bf16, "smem"), t(BIAS, bf16, "umat")),
        t(OUT, bf16, "smem"),
    ),
    (Conv2D(), (t((0, 8, 3, 3)), t(W), t(BIAS)), t((0, 16, 1, 1))),
    # refusals
    (Conv2D(), (t((8, 10, 10)), t(W), t(BIAS)), r"^Conv2D: operand 'x' must be \[N, C, H, W\]"),
    (Conv2D(), (t(X), t((16, 8, 3)), t(BIAS)), r"operand 'weight' must be \[O, C/groups, kH, kW\]"),
    (Conv2D(), (t(X), t(W), t((8,))), r"^Conv2D: operand 'bias' must be \[16\]"),
    (Conv2D(), (t(X), t((16, 4, 3, 3)), t(BIAS)), "with groups=1, x's 8 channels"),
    (Conv2D(groups=3), (t((4, 9, 10, 10)), t((16, 3, 3, 3)), t(BIAS)), "must divide by groups"),
    (Conv2D(), (t((4, N, 10, 10)), t(W), t(BIAS)), "channel and kernel extents must be static"),
    (Conv2D(), (t((4, 8, 2, 10)), t(W), t(BIAS)), "spatial axis 2 of x has extent 2"),
    (Conv2D(padding=1), (t((4, 8, 2, 10)), t(W), t(BIAS)), t((4, 16, 2, 10))),
    (Conv2D(), (t(X), t(W, bf16), t(BIAS)), r"operand 'weight' is bf16 but 'x' is f32"),
    (Conv2D(), (t(X, i32), t(W, i32), t(BIAS, i32)), "must be float tensors"),
    (Conv2D(), (t(X, f32, "smem"), t(W), t(BIAS)), "different storages"),
]


@pytest.mark.parametrize("op, args, expected", SHAPES)
def test_shapes(op, args, expected):
    check(op, args, expected)


@pytest.mark.parametrize(
    "attrs, match",
    [
        ({"stride": 0}, "attribute 'stride': every entry must be >= 1"),
        ({"stride": (1, 2, 3)}, "attribute 'stride': expected an int or a pair"),
        ({"padding": -1}, "attribute 'padding': every entry must be >= 0"),
        ({"dilation": (1, True)}, "attribute 'dilation': expected an int or a pair"),
        ({"groups": 0}, "attribute 'groups': must be a positive int"),
    ],
)
def test_attribute_validation(attrs, match):
    with pytest.raises(VerifyError, match=f"^Conv2D: {match}"):
        Conv2D(**attrs)
    assert Conv2D(stride=[2, 1]).stride == (2, 1)


SHARDING = [
    # batch split carries (hand-written canonical layouts)
    (Conv2D(), (s(X, Split(0)), t(W), t(BIAS)), s(OUT, Split(0))),
    # output channels split via the weight (bias split alike or replicated) carry
    (Conv2D(), (t(X), s(W, Split(0)), t(BIAS)), s(OUT, Split(1))),
    (Conv2D(), (t(X), s(W, Split(0)), s(BIAS, Split(0))), s(OUT, Split(1))),
    # ... but not with groups > 1: a device's output channels read their group's input
    # channels, no plain block of x, so no engine runs it per device (DESIGN §1: "whatever the
    # type checker accepts runs ... or is refused up front")
    (
        Conv2D(groups=2),
        (t(X), s((16, 4, 3, 3), Split(0)), t(BIAS)),
        r"^Conv2D: operand 'weight' is Split .* axis 0, and with groups=2 .*reshard\(weight",
    ),
    (
        Conv2D(groups=2),
        (t(X), t((16, 4, 3, 3)), s(BIAS, Split(0))),
        r"^Conv2D: operand 'bias' is Split .* axis 0, and with groups=2",
    ),
    (Conv2D(groups=2), (s(X, Split(0)), t((16, 4, 3, 3)), t(BIAS)), s(OUT, Split(0))),
    (Conv2D(), (s(X, Split(0), B_), s(W, B_, Split(0)), t(BIAS)), s(OUT, Split(0), Split(1))),
    # spatial splits fail closed: the window needs a halo from the neighbouring shard
    (
        Conv2D(),
        (s((4, 8, 12, 10), Split(2)), t(W), t(BIAS)),
        r"^Conv2D: operand 'x' is Split on mesh axis 0 \('x'\) along axis 2.*halo.*reshard\(x",
    ),
    (Conv2D(), (s((4, 8, 10, 12), B_, Split(3)), t(W), t(BIAS)), r"mesh axis 1 \('y'\).*axis 3"),
    # a split of a summed axis would leave Partial(sum) from the convolution, but every device
    # would also add the whole bias: it fails closed (DESIGN §4.6 unsound never)
    (
        Conv2D(),
        (s(X, Split(1)), s(W, Split(1)), t(BIAS)),
        r"^Conv2D: operand 'x' is Split on mesh axis 0 \('x'\) along axis 1.*bias.*reshard\(x",
    ),
    (Conv2D(), (t(X), s(W, Split(1)), t(BIAS)), r"operand 'weight' is Split .* along axis 1"),
    (Conv2D(), (t(X), s((16, 8, 4, 3), Split(2)), t(BIAS)), "'weight' is Split .* axis 2.*bias"),
    # rule 6: one mesh axis cannot partition the batch on x and the output channels on weight
    (Conv2D(), (s(X, Split(0)), s(W, Split(0)), t(BIAS)), r"^Conv2D: shard propagation.*rule 6"),
]


@pytest.mark.parametrize("op, args, expected", SHARDING)
def test_sharding(op, args, expected):
    check(op, args, expected)


# hir §1.3 nn: "Conv2D applies the same per-axis multilinear constraint to input, weight, and
# bias." conv(x, w) + b commutes with a pending sum on a mesh axis exactly when each term carries
# one Partial(sum) there: x or w (facing a replicated partner), and the bias.
PARTIALS = [
    ((s(X, PSUM), t(W), s(BIAS, PSUM)), s(OUT, PSUM)),
    ((t(X), s(W, PSUM), s(BIAS, PSUM)), s(OUT, PSUM)),
    ((s(X, PSUM, B_), s(W, B_, Split(0)), s(BIAS, PSUM, Split(0))), s(OUT, PSUM, Split(1))),
    ((s(X, Split(0), PSUM), t(W), s(BIAS, B_, PSUM)), s(OUT, Split(0), PSUM)),
    ((s(X, PSUM, B_), s(W, B_, PSUM), s(BIAS, PSUM, PSUM)), s(OUT, PSUM, PSUM)),
    (
        (s(X, PSUM), t(W), t(BIAS)),
        r"^Conv2D: Partial\(sum\) on mesh axis 0 \('x'\) does not commute with conv2d: 'x' "
        r"carries it but 'bias' is complete.*reshard\(x",
    ),
    ((t(X), s(W, B_, PSUM), t(BIAS)), r"mesh axis 1 \('y'\).*'weight' carries it but 'bias'"),
    ((t(X), t(W), s(BIAS, PSUM)), r"only the bias carries it.*reshard\(bias"),
    ((s(X, PSUM), s(W, PSUM), s(BIAS, PSUM)), r"x and weight both carry it.*reshard\(weight"),
    (
        (s(X, PSUM), s(W, Split(0)), s(BIAS, PSUM)),
        r"'x' carries it while 'weight' is Split there",
    ),
    (
        (s(X, Split(0)), s(W, PSUM), s(BIAS, PSUM)),
        r"'weight' carries it while 'x' is Split there",
    ),
    (
        (s(X, Partial("max")), t(W), s(BIAS, Partial("max"))),
        r"^Conv2D: operand 'x' carries Partial\(max\).*sum only.*reshard",
    ),
    ((t(X), t(W), s(BIAS, B_, Partial("min"))), r"operand 'bias' carries Partial\(min\)"),
]


@pytest.mark.parametrize("args, expected", PARTIALS)
def test_partials(args, expected):
    check(Conv2D(), args, expected)


def test_surface_name():
    assert surface_entry("conv2d").op_class is Conv2D


# ------------------------------------------------------------------------------------------------
# Reference kernel against an independently written direct convolution.


def direct_conv(x, w, b, stride, padding, dilation, groups):
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, ho, wo))
    per_group = o // groups
    for bn in range(n):
        for oc in range(o):
            group = oc // per_group
            for i in range(ho):
                for j in range(wo):
                    acc = float(b[oc])
                    for ic in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                row = i * sh + p * dh - ph
                                col = j * sw + q * dw - pw
                                if 0 <= row < h and 0 <= col < wd:
                                    xv = float(x[bn, group * cg + ic, row, col])
                                    acc += xv * float(w[oc, ic, p, q])
                    out[bn, oc, i, j] = acc
    return out


def run(op, x, w, b, dtype=f32):
    out_type = typeinfer_call(op, t(x.shape, dtype), t(w.shape, dtype), t(b.shape, dtype))
    return EVAL.lookup(Conv2D)(op, (x, w, b), out_type)


@pytest.mark.parametrize(
    "stride, padding, dilation, groups",
    [
        ((1, 1), (0, 0), (1, 1), 1),
        ((2, 1), (1, 2), (1, 2), 2),
        ((1, 2), (2, 0), (2, 1), 4),
        ((3, 3), (1, 1), (1, 1), 1),
    ],
)
def test_kernel_matches_direct_convolution(stride, padding, dilation, groups):
    rng = np.random.default_rng(sum(stride) + groups)
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((8, 4 // groups, 3, 2)).astype(np.float32)
    b = rng.standard_normal((8,)).astype(np.float32)
    op = Conv2D(stride=stride, padding=padding, dilation=dilation, groups=groups)
    got = run(op, x, w, b)
    expected = direct_conv(x, w, b, stride, padding, dilation, groups)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_kernel_literal_and_empty_batch():
    x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    w = np.array([[[[1.0, 0.0], [0.0, -1.0]]]], np.float32)
    b = np.array([0.5], np.float32)
    # x[i, j] - x[i + 1, j + 1] == -4 everywhere, plus the bias
    np.testing.assert_array_equal(run(Conv2D(), x, w, b), np.full((1, 1, 2, 2), -3.5))
    empty = run(Conv2D(), np.zeros((0, 1, 3, 3), np.float32), w, b)
    assert empty.shape == (0, 1, 2, 2)


def test_kernel_bf16_rounds_once():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 4, 4)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((3, 2, 2, 2)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((3,)).astype(ml_dtypes.bfloat16)
    op = Conv2D(padding=1)
    got = run(op, x, w, b, bf16)
    expected = direct_conv(x, w, b, (1, 1), (1, 1), (1, 1), 1).astype(ml_dtypes.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))
