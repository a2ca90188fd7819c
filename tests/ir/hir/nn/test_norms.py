"""LayerNorm and RMSNorm: typeinfer case tables, the whole-axis relation, reference kernels."""

from __future__ import annotations

import math

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.nn.norms import LayerNorm, RMSNorm
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    f16,
    f32,
    fp8e4m3,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Partial, Split, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
S = DimVar("S", 1, 4096)
H = DimVar("H", 1, 1024)
W16 = make_tensor_type((16,))


t = make_tensor_type  # the shorthand the case tables use


def sharded(shape, attrs, mesh=M1):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def check(op, args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, *args)
    else:
        assert typeinfer_call(op, *args) == expected


RMS_CASES = [
    # hir §1.3 RMSNorm: "weight MUST be rank-1 with the same length as x's last axis; every other
    # x axis, including a dynamic (DimVar / dim-arithmetic) entry, flows through unchanged."
    ((t((8, 16)), W16), t((8, 16))),
    ((t((N, 2 * S + 1, 16)), W16), t((N, 2 * S + 1, 16))),
    ((t((N, H)), t((H,))), t((N, H))),
    ((t((16,)), W16), t((16,))),
    ((t((4, 16), bf16, "smem"), t((16,), bf16, "smem")), t((4, 16), bf16, "smem")),
    ((t((4, 16), f32, "smem"), t((16,), f32, "umat")), t((4, 16), f32, "smem")),
    ((t((8, 16)), t((8,))), r"^RMSNorm: operand 'weight' must be rank-1 of x's last extent \[16\]"),
    ((t((8, 16)), t((1, 16))), "must be rank-1"),
    ((t((N, H)), W16), "must be rank-1"),
    ((t(()), t((1,))), "must have rank >= 1"),
    ((t((8, 16)), t((16,), bf16)), r"operand 'weight' is bf16 but 'x' is f32.*cast"),
    ((t((8, 16), i32), t((16,), i32)), "must be float tensors"),
    ((t((8, 16), f32, "smem"), W16), "different storages"),
    # Splits off the normalised axis carry; the layout is the canonical one (written by hand)
    ((sharded((8, 16), (Split(0),)), W16), sharded((8, 16), (Split(0),))),
    (
        (sharded((8, 4, 16), (Split(0), Split(1)), M2), W16),
        sharded((8, 4, 16), (Split(0), Split(1)), M2),
    ),
    (
        (sharded((8, 16), (Split(0),)), sharded((16,), (Broadcast(),))),
        sharded((8, 16), (Split(0),)),
    ),
    # "the reduced axis MUST stay inside a single op instance": a Split along it fails closed
    (
        (sharded((8, 16), (Split(1),)), W16),
        r"^RMSNorm: operand 'x' is Split on mesh axis 0 \('x'\) along axis 1.*whole axis.*reshard",
    ),
    ((t((8, 16)), sharded((16,), (Split(0),))), r"operand 'weight' is Split on mesh axis 0"),
    (
        (sharded((8, 16), (Broadcast(), Split(1)), M2), W16),
        r"operand 'x' is Split on mesh axis 1 \('y'\)",
    ),
]


@pytest.mark.parametrize("args, expected", RMS_CASES)
def test_rms_norm_typeinfer(args, expected):
    check(RMSNorm(), args, expected)


LAYER_CASES = [
    # torch layer_norm over the last axis; weight and bias are rank-1 of that extent
    ((t((8, 16)), W16, W16), t((8, 16))),
    ((t((N, 16), f16), t((16,), f16), t((16,), f16)), t((N, 16), f16)),
    ((t((8, 16)), W16, t((8,))), r"^LayerNorm: operand 'bias' must be rank-1"),
    ((t((8, 16)), W16, t((16,), bf16)), r"operand 'bias' is bf16 but 'x' is f32"),
    ((sharded((8, 16), (Split(0),)), W16, W16), sharded((8, 16), (Split(0),))),
    ((sharded((8, 16), (Split(1),)), W16, W16), r"operand 'x' is Split on mesh axis 0.*axis 1"),
    ((t((8, 16)), W16, sharded((16,), (Split(0),))), r"operand 'bias' is Split on mesh axis 0"),
]


@pytest.mark.parametrize("args, expected", LAYER_CASES)
def test_layer_norm_typeinfer(args, expected):
    check(LayerNorm(), args, expected)


# hir §1.3 RMSNorm / nn: "no mesh-axis reduction provably commutes; typeinfer rejects any Partial
# operand", including secondary affine inputs.
PARTIAL_X = [
    (sharded((8, 16), (Partial("sum"),)), r"mesh axis 0 \('x'\)"),
    (sharded((8, 16), (Partial("max"),)), r"mesh axis 0 \('x'\)"),
    (sharded((8, 16), (Split(0), Partial("min")), M2), r"mesh axis 1 \('y'\)"),
]


@pytest.mark.parametrize("x, axis", PARTIAL_X)
def test_rms_norm_rejects_partial_x(x, axis):
    check(RMSNorm(), [x, W16], rf"^RMSNorm: operand 'x' carries Partial\(\w+\) on {axis}.*reshard")


@pytest.mark.parametrize("x, axis", PARTIAL_X)
def test_layer_norm_rejects_partial_x(x, axis):
    check(LayerNorm(), [x, W16, W16], rf"^LayerNorm: operand 'x' carries Partial\(\w+\) on {axis}")


@pytest.mark.parametrize("reduction", ["sum", "max"])
@pytest.mark.parametrize("mesh", [M1, M2], ids=["1-axis", "2-axis"])
def test_partial_affine_inputs_rejected(reduction, mesh):
    partial_w = make_shard_tensor_type(
        (16,), f32, mesh=mesh, attrs=(Partial(reduction),) * mesh.rank
    )
    x = t((8, 16))
    check(RMSNorm(), [x, partial_w], rf"^RMSNorm: operand 'weight' carries Partial\({reduction}\)")
    check(LayerNorm(), [x, W16, partial_w], rf"operand 'bias' carries Partial\({reduction}\)")
    check(LayerNorm(), [x, partial_w, W16], rf"operand 'weight' carries Partial\({reduction}\)")


@pytest.mark.parametrize("op", [RMSNorm(), LayerNorm()], ids=repr)
def test_relation_keeps_the_last_axis_out_of_the_domain(op):
    # hir §1.3 RMSNorm: the reduced axis is "never an iteration-domain axis of its own, only an
    # existential range that both the read and the write cover in full".
    args = (t((N, 3, 16)),) + (W16,) * (len(type(op).inputs()) - 1)
    rel = ACCESS_RELATION.lookup(type(op))(op, args)
    assert rel.domain_rank == 2
    whole_row = isl.Map("{ [d0, d1] -> [d0, d1, w] }")
    assert rel.inputs[0].pattern.relation.is_equal(whole_row)
    assert rel.outputs[0].pattern.relation.is_equal(whole_row)
    for affine in rel.inputs[1:]:
        assert affine.pattern.relation.is_equal(isl.Map("{ [d0, d1] -> [w] }"))


def test_eps_attribute():
    assert RMSNorm().eps == 1e-6 and LayerNorm().eps == 1e-5
    assert RMSNorm(eps=0).eps == 0.0
    with pytest.raises(VerifyError, match=r"RMSNorm: attribute 'eps'.*non-negative"):
        RMSNorm(eps=-1.0)
    with pytest.raises(VerifyError, match=r"LayerNorm: attribute 'eps'.*number"):
        LayerNorm(eps="small")


def test_surface_names():
    assert surface_entry("rms_norm").op_class is RMSNorm
    assert surface_entry("layer_norm").op_class is LayerNorm


# ------------------------------------------------------------------------------------------------
# Reference kernels against explicit per-row loops with math.sqrt.


def rms_rows(rows, weight, eps):
    out = []
    for row in rows:
        scale = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([v * scale * w for v, w in zip(row, weight, strict=True)])
    return out


def layer_rows(rows, weight, bias, eps):
    out = []
    for row in rows:
        mean = sum(row) / len(row)
        var = sum((v - mean) ** 2 for v in row) / len(row)
        inv = 1.0 / math.sqrt(var + eps)
        out.append([(v - mean) * inv * w + b for v, w, b in zip(row, weight, bias, strict=True)])
    return out


DTYPES = {np.dtype(np.float32): f32, np.dtype(ml_dtypes.bfloat16): bf16}
DTYPES[np.dtype(ml_dtypes.float8_e4m3fn)] = fp8e4m3


def run(op, *args):
    dtype = DTYPES[args[0].dtype]
    return EVAL.lookup(type(op))(op, args, make_tensor_type(args[0].shape, dtype))


X = np.array([[1.0, -2.0, 3.0, 0.5], [0.0, 0.0, 0.0, 0.0], [10.0, 10.0, 10.0, 12.0]], np.float32)
WEIGHT = np.array([1.0, 0.5, -1.0, 2.0], np.float32)
BIAS = np.array([0.0, 1.0, -0.25, 3.0], np.float32)


def test_rms_norm_kernel():
    got = run(RMSNorm(eps=1e-6), X, WEIGHT)
    np.testing.assert_allclose(got, rms_rows(X.tolist(), WEIGHT.tolist(), 1e-6), rtol=1e-6)


def test_layer_norm_kernel():
    got = run(LayerNorm(eps=1e-5), X, WEIGHT, BIAS)
    expected = layer_rows(X.tolist(), WEIGHT.tolist(), BIAS.tolist(), 1e-5)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_kernels_on_higher_rank_and_empty_inputs():
    x3 = X.reshape(3, 1, 4)
    expected = np.array(rms_rows(X.tolist(), WEIGHT.tolist(), 1e-6)).reshape(3, 1, 4)
    np.testing.assert_allclose(run(RMSNorm(), x3, WEIGHT), expected, rtol=1e-6)
    assert run(RMSNorm(), np.zeros((0, 4), np.float32), WEIGHT).shape == (0, 4)
    empty_row = np.zeros((2, 0), np.float32)
    none = np.zeros((0,), np.float32)
    assert run(LayerNorm(), empty_row, none, none).shape == (2, 0)


@pytest.mark.parametrize("narrow", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_kernels_round_narrow_floats_once(narrow):
    x, w, b = X.astype(narrow), WEIGHT.astype(narrow), BIAS.astype(narrow)
    wide = [a.astype(np.float64).tolist() for a in (x, w, b)]
    rms = np.array(rms_rows(wide[0], wide[1], 1e-6)).astype(narrow)
    layer = np.array(layer_rows(*wide, 1e-5)).astype(narrow)
    got_rms, got_layer = run(RMSNorm(), x, w), run(LayerNorm(), x, w, b)
    assert got_rms.dtype == narrow and got_layer.dtype == narrow
    np.testing.assert_array_equal(got_rms.astype(np.float64), rms.astype(np.float64))
    np.testing.assert_array_equal(got_layer.astype(np.float64), layer.astype(np.float64))
