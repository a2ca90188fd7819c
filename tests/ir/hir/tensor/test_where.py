"""Where: typeinfer case table (bool cond, shared x/y dtype, broadcasting over all three operands,
storage, layouts, refusal of every Partial), reference kernel and surface name."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.tensor.where import Where
from tilefoundry.ir.types import (
    DType,
    bf16,
    bool_,
    f32,
    i32,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Partial, Split, make_mesh
from tilefoundry.rules import EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
SUM, MAX, MIN = Partial("sum"), Partial("max"), Partial("min")


t = make_tensor_type  # the shorthand the case tables use


def cond(shape, storage="gmem"):
    return make_tensor_type(shape, bool_, storage)


def sx(shape, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=X, attrs=attrs)


def sxy(shape, *attrs, dtype=f32):
    return make_shard_tensor_type(shape, dtype, mesh=XY, attrs=attrs)


def case(id_, c, x, y, expected):
    return pytest.param(c, x, y, expected, id=id_)


CASES = [
    # torch.where: cond bool, x/y one dtype (no promotion), the result has x's dtype
    case("same", cond((4, 8)), t((4, 8)), t((4, 8)), t((4, 8))),
    case("bf16", cond((4,)), t((4,), bf16), t((4,), bf16), t((4,), bf16)),
    case("cond-f32", t((4,)), t((4,)), t((4,)), r"^Where: operand 'cond' must be bool, got f32"),
    case("xy-mismatch", cond((4,)), t((4,)), t((4,), bf16), r"^Where: operand 'y' is bf16 but 'x'"),
    case("xy-int", cond((4,)), t((4,), i32), t((4,), i32), t((4,), i32)),
    # torch broadcasting over all three operands
    case("broadcast-3", cond((4, 1)), t((8,)), t(()), t((4, 8))),
    case("cond-widest", cond((2, 4, 8)), t((4, 8)), t((8,)), t((2, 4, 8))),
    case("empty", cond((0, 1)), t((3,)), t((3,)), t((0, 3))),
    case("clash", cond((4,)), t((8,)), t((8,)), r"^Where: operand shapes do not broadcast"),
    # semantic-analysis §3.3: storage anchors on the concrete operands
    case(
        "storage",
        cond((4,), "umat"),
        t((4,), storage="rmem"),
        t((4,), storage="rmem"),
        t((4,), storage="rmem"),
    ),
    case("storage-clash", cond((4,)), t((4,), storage="smem"), t((4,)), r"different storages"),
    # semantic-analysis §3.2: the layout follows the elementwise relation
    case("split-x", cond((8,)), sx((8,), Split(0)), t((8,)), sx((8,), Split(0))),
    case(
        "split-cond-into-rows",
        make_shard_tensor_type((4, 1), bool_, mesh=X, attrs=(Split(0),)),
        t((4, 8)),
        t((8,)),
        sx((4, 8), Split(0)),
    ),
    case(
        "split-2-axes",
        cond((4, 8)),
        sxy((4, 8), Split(0), B),
        sxy((4, 8), B, Split(1)),
        sxy((4, 8), Split(0), Split(1)),
    ),
    case("split-clash", cond((8,)), sx((8,), Split(0)), sxy((8,), Split(0), B), r"^Where: shard"),
]

PARTIALS = [
    # select is not linear in cond and not proven to commute for x/y: reject every Partial
    case(
        f"{name}-{p.reduction}",
        make_shard_tensor_type((8,), bool_, mesh=X, attrs=(p,)) if name == "cond" else cond((8,)),
        sx((8,), p) if name == "x" else t((8,)),
        sx((8,), p) if name == "y" else t((8,)),
        rf"^Where: operand '{name}' carries Partial\({p.reduction}\) on mesh axis 0 \('x'\).*"
        rf"insert reshard\({name}, \.\.\.\) to Broadcast",
    )
    for name in ("cond", "x", "y")
    for p in (SUM, MAX, MIN)
] + [
    case("x-and-y-sum", cond((8,)), sx((8,), SUM), sx((8,), SUM), r"'x' carries Partial\(sum\)"),
    case("y-on-axis-1", cond((8,)), t((8,)), sxy((8,), Split(0), MAX), r"mesh axis 1 \('y'\)"),
]


@pytest.mark.parametrize(("c", "x", "y", "expected"), CASES + PARTIALS)
def test_typeinfer(c, x, y, expected):
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=expected):
            typeinfer_call(Where(), c, x, y)
        return
    assert typeinfer_call(Where(), c, x, y) == expected


# ---------------------------------------------------------------------------------------------
# Reference kernel


def evaluate(c, x, y):
    types = [make_tensor_type(a.shape, DType.from_numpy(a.dtype)) for a in (c, x, y)]
    out_type = typeinfer_call(Where(), *types)
    result = EVAL.lookup(Where)(Where(), (c, x, y), out_type)
    assert result.dtype == out_type.dtype.to_numpy()
    assert result.shape == tuple(out_type.shape)
    return result


def test_select_with_broadcasting():
    c = np.array([[True], [False]])
    x = np.array([1, 2, 3], np.int32)
    y = np.array(-1, np.int32)
    np.testing.assert_array_equal(evaluate(c, x, y), [[1, 2, 3], [-1, -1, -1]])


def test_narrow_floats_are_selected_bit_exactly():
    x = np.array([0.1, 3.3], ml_dtypes.bfloat16)
    y = np.array([-0.0, np.nan], ml_dtypes.bfloat16)
    out = evaluate(np.array([False, True]), x, y)
    assert out.view(np.uint16).tolist() == [y.view(np.uint16)[0], x.view(np.uint16)[1]]


def test_empty():
    out = evaluate(np.zeros((0, 1), bool), np.ones(3, np.float32), np.zeros(3, np.float32))
    assert out.shape == (0, 3)


def test_surface_name():
    entry = surface_entry("where")
    assert entry.op_class is Where
    assert entry.fixed == {}
