"""Reshape: the seed's sharded-view rules (hir tensor Reshape, DESIGN §4.7) and the kernel."""

from __future__ import annotations

import re

import islpy as isl
import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir.op_support import relations_of
from tilefoundry.ir.hir.tensor.reshape import Reshape
from tilefoundry.ir.types import DimVar, bf16, f32, i32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, Split, make_mesh
from tilefoundry.rules import EVAL

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
ONE = make_mesh((1,), ("tp",))
# Simulated-only meshes: the seed's merge "in either direction" keeps an inner Split there; on a
# device mesh (X, XY) such a merge is refused when checked (module doc of reshape, issue 28).
WARPS = make_mesh((4,), ("x",), topology="warp")
WARPS2 = make_mesh((2, 4), ("x", "y"), topology="warp")
SEQ = DimVar("SEQ", 1, 64)


def plain(shape, dtype=f32, storage="gmem"):
    return make_tensor_type(shape, dtype, storage)


def sharded(shape, mesh, *attrs):
    """Split(i) names logical axis i (canonical layout)."""
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def laid_out(shape, layout_shape, stride, mesh, *attrs):
    """Split(k) names layout position k of an explicit layout."""
    return make_tensor_type(
        shape, f32, layout=ShardLayout(Layout(layout_shape, stride), attrs, mesh)
    )


# (id, operand, new_shape, expected type | error regex)
CASES = [
    # hir Reshape: the result shape is new_shape; size(new_shape) == size(x.shape)
    ("merge", plain((16, 8)), (128,), plain((128,))),
    ("split", plain((128,)), (4, 4, 8), plain((4, 4, 8))),
    ("rank 0 to rank 1", plain(()), (1,), plain((1,))),
    ("to rank 0", plain((1, 1)), (), plain(())),
    ("empty", plain((0, 4)), (4, 0), plain((4, 0))),
    ("dtype and storage kept", plain((2, 3), i32, "smem"), (6,), plain((6,), i32, "smem")),
    ("size mismatch", plain((16, 8)), (100,), r"Reshape: new_shape \(100\) has 100 elements"),
    # seed silent on -1: one inferred axis, like torch
    ("-1 inferred", plain((16, 8)), (-1, 4), plain((32, 4))),
    ("-1 alone", plain((16, 8)), (-1,), plain((128,))),
    ("-1 not divisible", plain((16, 8)), (-1, 3), r"cannot infer the -1.*128 elements"),
    ("-1 next to zero", plain((0, 8)), (0, -1), r"zero extent"),
    # symbolic dims: the product must match in the dim normal form
    ("symbolic carried", plain((SEQ, 16)), (SEQ, 4, 4), plain((SEQ, 4, 4))),
    ("symbolic merged", plain((SEQ, 16)), (16 * SEQ,), plain((16 * SEQ,))),
    ("symbolic -1", plain((SEQ, 16)), (-1, 4), plain((4 * SEQ, 4))),
    ("symbolic mismatch", plain((SEQ, 16)), (SEQ, 8), r"has 8\*SEQ elements.*16\*SEQ"),
    # hir Reshape: a plain input reshapes to a plain output
    (
        "plain strided layout gives plain",
        make_tensor_type((4, 8), f32, layout=Layout((4, 8), (1, 4))),
        (32,),
        plain((32,)),
    ),
    # hir Reshape / DESIGN §4.7: fully-Broadcast ShardLayout gives a plain output
    ("fully Broadcast", sharded((16, 8), XY, B, B), (8, 16), plain((8, 16))),
    # hir Reshape case 1: every layout position within one new axis (either merge direction)
    ("view: merge all", sharded((16, 8), X, S(0)), (128,), sharded((128,), X, S(0))),
    ("view: positions as axes", sharded((16, 8), X, S(0)), (4, 4, 8), sharded((4, 4, 8), X, S(0))),
    ("view: merge residual", sharded((4, 4, 8), X, S(0)), (4, 32), sharded((4, 32), X, S(0))),
    ("view: inner Split merged", sharded((16, 8), WARPS, S(1)), (128,), laid_out(
        (128,), (16, 4, 2), (8, 2, 1), WARPS, S(1))),
    ("view: two mesh axes", sharded((16, 8), WARPS2, S(0), S(1)), (128,), laid_out(
        (128,), (2, 8, 4, 2), (64, 8, 2, 1), WARPS2, S(0), S(2))),
    # ... and on a device mesh the same merges are refused, naming the split and the fix
    ("device mesh: inner Split merged", sharded((16, 8), X, S(1)), (128,),
     r"folds an unsplit axis over the split by mesh axis 0 \('x'\), which becomes an inner "
     r"factor of new axis 0 \(factors \(16, 4, 2\)\).*Broadcast on mesh axis 0 \('x'\) "
     r"before the reshape"),
    ("device mesh: two mesh axes", sharded((16, 8), XY, S(0), S(1)), (128,),
     r"split by mesh axis 0 \('x'\), mesh axis 1 \('y'\), which becomes an inner factor"),
    ("view: one axis on two mesh axes", sharded((16, 8), XY, S(0), S(0)), (128,),
     sharded((128,), XY, S(0), S(0))),
    # hir Reshape (a view over the layout positions): a mesh axis of extent 1 splits a layout
    # position of extent 1; the Split lands where it would on a larger mesh (the heads of a
    # one-device tensor-parallel layer), not refused.
    ("view: one-device mesh, split axis divides", sharded((2, 64), ONE, S(1)), (2, 8, 8),
     laid_out((2, 8, 8), (2, 1, 8, 8), (64, 64, 8, 1), ONE, S(1))),
    ("one-device mesh: inner Split merged, as on any device mesh", sharded((8, 2), ONE, S(1)),
     (16,), r"folds an unsplit axis over the split by mesh axis 0 \('tp'\)"),
    ("view: one-device mesh, trailing", sharded((4, 1), ONE, S(1)), (4,),
     sharded((4,), ONE, S(0))),
    # hir Reshape case 1: size-1 axes insert/drop freely and hold no sharding
    ("view: insert size-1", sharded((16, 8), X, S(0)), (16, 1, 8), sharded((16, 1, 8), X, S(0))),
    ("view: drop size-1", sharded((16, 1, 8), X, S(0)), (16, 8), sharded((16, 8), X, S(0))),
    # hir Reshape case 1: Partial / Broadcast carry unchanged (mesh-axis states)
    ("Partial carries", sharded((16, 8), XY, B, P("sum")), (8, 16),
     sharded((8, 16), XY, B, P("sum"))),
    ("Partial max with Split", sharded((16, 8), XY, S(0), P("max")), (128,),
     sharded((128,), XY, S(0), P("max"))),
    # hir Reshape case 2: the Split-bound block divides once, where its mesh extent divides:
    # outer = (mesh_ext Split, sub/mesh_ext plain), inner residual plain
    ("one divide", sharded((16, 8), X, S(0)), (8, 16), sharded((8, 16), X, S(0))),
    ("one divide, inner kept", sharded((32, 8), X, S(0)), (8, 4, 8), laid_out(
        (8, 4, 8), (4, 2, 4, 8), (64, 32, 8, 1), X, S(0))),
    # hir Reshape: a deeper divide of the Split-bound block fails closed
    ("deeper divide", sharded((32, 8), X, S(0)), (8, 2, 2, 8),
     r"more than one new-axis boundary.*reshard\(x, \.\.\.\) to Broadcast on mesh axis 0 \('x'\)"),
    # hir Reshape: a Split-bound position itself cannot divide (its mesh extent does not divide 2)
    ("Split position divides", sharded((16, 8), X, S(0)), (2, 64), r"Split-bound position 0"),
    # hir Reshape: two Split-bound positions interacting across one regroup fail closed
    ("two Splits interact", sharded((16, 8), XY, S(0), S(1)), (8, 16),
     r"regroups two Split-bound positions.*mesh axis 0 \('x'\), mesh axis 1 \('y'\)"),
    ("Split block of two mesh axes", sharded((16, 8), XY, S(0), S(0)), (4, 32),
     r"Split-bound position 1"),
    # deviation (documented in the module): an unsharded axis's positions may divide freely
    ("free divide", sharded((16, 8), X, S(0)), (16, 2, 4), laid_out(
        (16, 2, 4), (4, 4, 2, 4), (32, 8, 4, 1), X, S(0))),
    ("free divide, Partial only", sharded((16, 8), X, P("sum")), (8, 16),
     sharded((8, 16), X, P("sum"))),
    # a refusal's fix names only the mesh axes x holds something on (issue 28: not "its split
    # mesh axes" for a value that has none)
    ("no view, Partial only", sharded((6, 4), XY, B, P("sum")), (4, 6),
     r"does not divide at a new-axis boundary\); insert reshard\(x, \.\.\.\) to Broadcast on "
     r"mesh axis 1 \('y'\) before the reshape$"),
    # symbolic positions carry whole
    ("symbolic Split carried", sharded((SEQ, 16), X, S(0)), (SEQ, 4, 4),
     sharded((SEQ, 4, 4), X, S(0))),
    ("symbolic divide refused", sharded((SEQ, 16), X, S(1)), (SEQ, 2, 2, 4),
     r"Split-bound position 1"),
    # per-instance strides are kept per position; a fresh size-1 position gets stride 0
    ("per-instance strides", laid_out((16, 8), (4, 4, 8), (0, 8, 1), X, S(0)), (4, 4, 1, 8),
     laid_out((4, 4, 1, 8), (4, 4, 1, 8), (0, 8, 0, 1), X, S(0))),
    # a Split of a mesh axis of extent 1 is refused (conservative)
    ("unit Split", sharded((1, 8), ONE, S(0)), (8,), sharded((8,), ONE, S(0))),
]  # fmt: skip


@pytest.mark.parametrize(
    ("x", "new_shape", "expected"), [pytest.param(*row[1:], id=row[0]) for row in CASES]
)
def test_typeinfer(x, new_shape, expected):
    op = Reshape(new_shape=new_shape)
    if isinstance(expected, str):
        with pytest.raises(VerifyError, match=re.compile(expected, re.S)):
            typeinfer_call(op, x)
    else:
        assert typeinfer_call(op, x) == expected


def test_composed_layout_fails_closed():
    from tilefoundry.ir.types.shard import ComposedLayout

    inner = Layout((4, 4, 8), (32, 8, 1))
    composed = ComposedLayout(inner, 0, Layout((4, 4, 8), (32, 8, 1)))
    x = make_tensor_type((16, 8), f32, layout=ShardLayout(composed, (S(0),), X))
    with pytest.raises(VerifyError, match="its layout is a composition, not a plain Layout"):
        typeinfer_call(Reshape(new_shape=(128,)), x)


@pytest.mark.parametrize(
    ("new_shape", "match"),
    [((-1, -1), "more than one -1"), ((4, -2), "negative extent -2"), ((1.5,), "new_shape entry")],
)
def test_bad_new_shape_attribute(new_shape, match):
    with pytest.raises(VerifyError, match=match):
        Reshape(new_shape=new_shape)


def test_tuple_operand_is_refused():
    from tilefoundry.ir.types import TupleType

    with pytest.raises(VerifyError, match="operand 'x' must be a tensor"):
        typeinfer_call(Reshape(new_shape=(4,)), TupleType((plain((4,)),)))


def test_relation_is_the_row_major_view():
    relation = relations_of(Reshape(new_shape=(8, 16)), (plain((16, 8)),)).inputs[0].pattern
    # out (i, j) reads linear index 16i + j of x (16, 8), i.e. x[(16i+j)//8, (16i+j)%8]
    for i, j in [(0, 0), (3, 9), (7, 15)]:
        linear = 16 * i + j
        read = relation.relation.intersect_domain(isl.Set(f"{{ [{i}, {j}] }}")).range()
        assert read.is_equal(isl.Set(f"{{ [{linear // 8}, {linear % 8}] }}")), read


def test_symbolic_regroup_has_no_relation():
    assert relations_of(Reshape(new_shape=(16 * SEQ,)), (plain((SEQ, 16)),)) is None


KERNEL = EVAL.lookup(Reshape)


def test_kernel_matches_row_major_order():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = KERNEL(Reshape(new_shape=(4, -1)), (x,), plain((4, 6)))
    assert out.shape == (4, 6)
    assert out[1].tolist() == [6, 7, 8, 9, 10, 11]
    assert out[3, 5] == 23


def test_kernel_narrow_floats_and_empty():
    x = np.array([[1.5, -2.0], [0.25, 3.0]], dtype=ml_dtypes.bfloat16)
    out = KERNEL(Reshape(new_shape=(4,)), (x,), make_tensor_type((4,), bf16))
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).tolist() == [1.5, -2.0, 0.25, 3.0]
    f8 = np.zeros((2, 2), dtype=ml_dtypes.float8_e4m3fn)
    assert KERNEL(Reshape(new_shape=(1, 4)), (f8,), plain((1, 4))).shape == (1, 4)
    assert KERNEL(Reshape(new_shape=(0, 3)), (np.zeros((3, 0)),), plain((0, 3))).shape == (0, 3)


def test_kernel_resolves_one_symbolic_extent():
    x = np.arange(12).reshape(3, 4)
    out = KERNEL(Reshape(new_shape=(SEQ, 2)), (x,), plain((SEQ, 2)))
    assert out.shape == (6, 2)


def owners(sl, size):
    """Mesh coordinate owning each row-major element, read off the layout digits (§3.1)."""
    extents = list(sl.layout.shape)
    split_at = {attr.axis: a for a, attr in enumerate(sl.attrs) if isinstance(attr, Split)}
    result = []
    for linear in range(size):
        digits, rest = [], linear
        for extent in reversed(extents):
            digits.append(rest % extent)
            rest //= extent
        digits.reverse()
        result.append(tuple(sorted((a, digits[k]) for k, a in split_at.items())))
    return result


@pytest.mark.parametrize(
    ("x", "new_shape", "expected"),
    [
        pytest.param(*row[1:], id=row[0])
        for row in CASES
        if not isinstance(row[3], str)
        and isinstance(row[3].layout, ShardLayout)
        and all(isinstance(d, int) for d in row[1].shape)
    ],
)
def test_accepted_sharded_reshape_keeps_every_element_on_its_device(x, new_shape, expected):
    """Independent of the rule: a reshape moves no element, so each row-major element must be
    owned by the same mesh coordinate before and after."""
    out = typeinfer_call(Reshape(new_shape=new_shape), x)
    size = int(np.prod(x.shape))
    assert owners(out.layout, size) == owners(x.layout, size)
