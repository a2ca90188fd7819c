"""SoftMax: typeinfer case table, the whole-axis relation, and the reference kernel."""

from __future__ import annotations

import math

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.nn.softmax import SoftMax
from tilefoundry.ir.types import (
    DimVar,
    bf16,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import Broadcast, Partial, Split, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

M1 = make_mesh((4,), ("x",))
M2 = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)


def sharded(shape, attrs, mesh=M1):
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def check(op, args, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(op, *args)
    else:
        assert typeinfer_call(op, *args) == expected


CASES = [
    # shapes, dtypes and storage pass through (softmax is shape-preserving)
    (SoftMax(), make_tensor_type((8, 16)), make_tensor_type((8, 16))),
    (
        SoftMax(axis=0),
        make_tensor_type((N, 3), bf16, "smem"),
        make_tensor_type((N, 3), bf16, "smem"),
    ),
    (SoftMax(axis=-2), make_tensor_type((2, 0, 5)), make_tensor_type((2, 0, 5))),
    (SoftMax(axis=2), make_tensor_type((8, 16)), r"^SoftMax: axis 2 is out of range for rank 2"),
    (SoftMax(), make_tensor_type(()), "must have rank >= 1"),
    (SoftMax(), make_tensor_type((4,), i32), "must be a float tensor"),
    # a Split on an axis that is not normalised carries (hand-written canonical layouts)
    (SoftMax(), sharded((8, 16), (Split(0),)), sharded((8, 16), (Split(0),))),
    (SoftMax(axis=0), sharded((8, 16), (Split(1),)), sharded((8, 16), (Split(1),))),
    (
        SoftMax(),
        sharded((8, 4, 16), (Split(1), Split(0)), M2),
        sharded((8, 4, 16), (Split(1), Split(0)), M2),
    ),
    (SoftMax(), sharded((8, 16), (Broadcast(), Broadcast()), M2), make_tensor_type((8, 16))),
    # the normalised axis stays inside one op instance: a Split along it fails closed
    (
        SoftMax(),
        sharded((8, 16), (Split(1),)),
        r"^SoftMax: operand 'x' is Split on mesh axis 0 \('x'\) along axis 1.*whole axis.*reshard",
    ),
    (
        SoftMax(axis=0),
        sharded((8, 16), (Broadcast(), Split(0)), M2),
        r"Split on mesh axis 1 \('y'\) along axis 0",
    ),
]


@pytest.mark.parametrize("op, x, expected", CASES)
def test_typeinfer(op, x, expected):
    check(op, [x], expected)


# hir §1.3 nn: "SoftMax / LayerNorm normalize across an axis (a non-monotonic combination of every
# value on that axis), so no reduction provably commutes; typeinfer rejects any Partial operand."
@pytest.mark.parametrize("reduction", ["sum", "max", "min"])
@pytest.mark.parametrize(
    "attrs, axis",
    [
        ((None,), r"mesh axis 0 \('x'\)"),
        ((Split(0), None), r"mesh axis 1 \('y'\)"),
    ],
)
def test_rejects_every_partial(reduction, attrs, axis):
    attrs = tuple(Partial(reduction) if a is None else a for a in attrs)
    mesh = M1 if len(attrs) == 1 else M2
    check(
        SoftMax(),
        [sharded((8, 16), attrs, mesh)],
        rf"^SoftMax: operand 'x' carries Partial\({reduction}\) on {axis}.*no reduction.*reshard",
    )


def test_relation_reads_the_axis_whole():
    # The normalised axis is an existential range of both read and write, not a domain dim.
    rel = ACCESS_RELATION.lookup(SoftMax)(SoftMax(axis=1), (make_tensor_type((2, 3, 4)),))
    assert rel.domain_rank == 2
    expected = isl.Map("{ [d0, d1] -> [d0, w, d1] }")
    for boundary in (rel.inputs[0], rel.outputs[0]):
        assert boundary.pattern.relation.is_equal(expected)


def test_surface_name():
    assert surface_entry("softmax").op_class is SoftMax


# ------------------------------------------------------------------------------------------------
# Reference kernel against explicit loops with math.exp.


def softmax_loops(rows):
    out = []
    for row in rows:
        peak = max(row)
        exps = [math.exp(v - peak) for v in row]
        total = sum(exps)
        out.append([e / total for e in exps])
    return out


def run(op, x):
    x = np.asarray(x)
    dtype = bf16 if x.dtype == ml_dtypes.bfloat16 else f32
    return EVAL.lookup(SoftMax)(op, (x,), make_tensor_type(x.shape, dtype))


def test_kernel_last_axis():
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1000.0, 1001.0, -5.0]], np.float32)
    np.testing.assert_allclose(run(SoftMax(), x), softmax_loops(x.tolist()), rtol=1e-6)


def test_kernel_first_axis_and_negative_axis():
    x = np.array([[1.0, -2.0], [0.5, 4.0], [3.0, 0.0]], np.float32)
    expected = np.array(softmax_loops(x.T.tolist())).T
    np.testing.assert_allclose(run(SoftMax(axis=0), x), expected, rtol=1e-6)
    np.testing.assert_allclose(run(SoftMax(axis=-2), x), expected, rtol=1e-6)


def test_kernel_edge_cases():
    assert run(SoftMax(), np.zeros((3, 0), np.float32)).shape == (3, 0)
    np.testing.assert_array_equal(run(SoftMax(), np.array([7.0], np.float32)), [1.0])
    # a row of only -inf has no maximum to shift by: nan, as torch gives
    assert np.isnan(run(SoftMax(), np.full((1, 2), -np.inf, np.float32))).all()


def test_kernel_bf16_rounds_once():
    x = np.array([[0.5, 1.25, -2.0, 3.0]], ml_dtypes.bfloat16)
    expected = np.array(softmax_loops(x.astype(np.float64).tolist())).astype(ml_dtypes.bfloat16)
    got = run(SoftMax(), x)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))
