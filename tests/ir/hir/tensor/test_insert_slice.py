"""InsertSlice (hir §1.3 InsertSlice): typeinfer case table, literal windows, kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.typeinfer import TypeInferContext
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Call, Constant, Tuple, Var
from tilefoundry.ir.hir.op_support import NO_AFFINE_RELATION
from tilefoundry.ir.hir.tensor.insert_slice import InsertSlice
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Dynamic, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
OP = InsertSlice()
D = Dynamic()


t = make_tensor_type  # the shorthand the case tables use


def sharded(shape, mesh, *attrs, dtype=f32):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, dtype, mesh=mesh, attrs=attrs)


def scalar(dtype=i64, storage="gmem"):
    return t((), dtype, storage)


def offs(n, dtype=i64):
    return TupleType(tuple(scalar(dtype) for _ in range(n)))


ACCEPT = [
    # hir §1.3 InsertSlice: a rank-N dst takes an offset tuple of rank-0 integer scalars; the
    # result is dst's value with the window written, so it has dst's type.
    ("rank 2", (t((8, 16)), t((2, 4)), offs(2)), t((8, 16))),
    ("i32 offsets", (t((8, 16), bf16), t((8, 4), bf16), offs(2, i32)), t((8, 16), bf16)),
    ("full window", (t((4,)), t((4,)), offs(1)), t((4,))),
    ("empty window", (t((4,)), t((0,)), scalar()), t((4,))),
    # hir §1.3 InsertSlice: a rank-1 dst accepts a bare rank-0 scalar offset.
    ("rank 1 bare scalar", (t((8,)), t((3,)), scalar(i32)), t((8,))),
    ("symbolic dst", (t((N, 4)), t((2, 4)), offs(2)), t((N, 4))),
    # The result lives in dst's storage (value form writes into dst's buffer).
    ("dst storage wins", (t((8,), storage="rmem"), t((2,)), scalar()), t((8,), storage="rmem")),
    ("umat dst takes update's", (t((8,), storage="umat"), t((2,)), scalar()), t((8,))),
    # hir §1.3 InsertSlice: a Partial dst with the identical mesh and per-mesh-axis state.
    (
        "Partial(sum) dst and update",
        (sharded((8, 16), X, P("sum")), sharded((2, 4), X, P("sum")), offs(2)),
        sharded((8, 16), X, P("sum")),
    ),
    (
        "Partial(max) beside Broadcast, two-axis mesh",
        (sharded((8, 16), XY, B, P("max")), sharded((2, 4), XY, B, P("max")), offs(2)),
        sharded((8, 16), XY, B, P("max")),
    ),
    (
        "Partial dst with a split on a whole axis",
        (sharded((8, 16), XY, S(0), P("sum")), sharded((8, 4), XY, S(0), P("sum")), offs(2)),
        sharded((8, 16), XY, S(0), P("sum")),
    ),
    # Module doc: a Split on an axis the window covers whole is elementwise there.
    (
        "same split outside the window",
        (sharded((8, 16), X, S(0)), sharded((8, 4), X, S(0)), offs(2)),
        sharded((8, 16), X, S(0)),
    ),
    (
        "replicated shard update into a plain dst",
        (t((8, 16)), sharded((2, 4), X, B), offs(2)),
        t((8, 16)),
    ),
]


@pytest.mark.parametrize(("case", "args", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, args, expected):
    assert typeinfer_call(OP, *args) == expected


REJECT = [
    # hir §1.3 InsertSlice: update has the same rank and dtype as dst.
    ("rank mismatch", (t((8, 16)), t((4,)), offs(2)), r"InsertSlice: update has rank 1 but dst"),
    ("dtype mismatch", (t((8,)), t((2,), bf16), scalar()), r"operand 'update' is bf16 but 'dst'"),
    # hir §1.3 InsertSlice: a rank-N dst requires an offset tuple whose length equals the rank.
    ("bare scalar, rank 2", (t((8, 16)), t((2, 4)), scalar()), r"bare scalar offset .* rank-1"),
    ("short tuple", (t((8, 16)), t((2, 4)), offs(1)), r"InsertSlice: 1 offsets for a rank-2 dst"),
    ("float offset", (t((8,)), t((2,)), scalar(f32)), r"offset for axis 0 must be a rank-0 int"),
    ("rank-1 offset", (t((8,)), t((2,)), TupleType((t((1,), i64),))), r"rank-0 integer"),
    ("tensor dst only", (offs(1), t((2,)), scalar()), r"operand 'dst' must be a tensor"),
    # A window larger than dst on an axis never fits, whatever the offset.
    ("update too big", (t((8, 4)), t((2, 5)), offs(2)), r"update extent 5 exceeds dst extent 4"),
    # hir §1.3 InsertSlice: a complete dst MUST reject an update carrying a Partial.
    (
        "complete dst, Partial update",
        (t((8, 16)), sharded((2, 4), X, P("sum")), offs(2)),
        r"InsertSlice: operand 'update' carries Partial\(sum\) on mesh axis 0 \('x'\) but 'dst' "
        r"is complete.*insert reshard\(update, \.\.\.\) to Broadcast on mesh axis 0",
    ),
    (
        "replicated dst, Partial update on the second mesh axis",
        (sharded((8, 16), XY, B, B), sharded((2, 4), XY, B, P("max")), offs(2)),
        r"Partial\(max\) on mesh axis 1 \('y'\)",
    ),
    # hir §1.3 InsertSlice: a Partial dst needs the identical mesh and per-mesh-axis state.
    (
        "Partial dst, plain update",
        (sharded((8, 16), X, P("sum")), t((2, 4)), offs(2)),
        r"'dst' carries a Partial, so 'update' must carry the identical mesh.*not sharded",
    ),
    (
        "Partial(sum) dst, Partial(max) update",
        (sharded((8, 16), X, P("sum")), sharded((2, 4), X, P("max")), offs(2)),
        r"on mesh axis 0 \('x'\) 'dst' is P\(sum\) but 'update' is P\(max\)",
    ),
    (
        "Partial on another mesh axis",
        (sharded((8, 16), XY, P("sum"), B), sharded((2, 4), XY, B, P("sum")), offs(2)),
        r"on mesh axis 0 \('x'\) 'dst' is P\(sum\) but 'update' is B",
    ),
    (
        "Partial dst, update on another mesh",
        (
            sharded((8, 16), X, P("sum")),
            sharded((2, 4), make_mesh((4,), ("z",)), P("sum")),
            offs(2),
        ),
        r"identical mesh",
    ),
    # Module doc: Splits — none on a window axis, identical elsewhere (fail closed).
    (
        "split on a window axis",
        (sharded((8, 16), X, S(1)), sharded((8, 4), X, S(1)), offs(2)),
        r"operand 'dst' is Split on mesh axis 0 \('x'\) along axis 1, where the write window",
    ),
    (
        "split update, plain dst",
        (t((8, 16)), sharded((8, 4), X, S(0)), offs(2)),
        r"'dst' and 'update' must be split the same way",
    ),
    (
        "split dst, replicated update",
        (sharded((8, 16), X, S(0)), t((8, 4)), offs(2)),
        r"must be split the same way",
    ),
    (
        "Dynamic update",
        (t((8,)), make_tensor_type((2,), f32, layout=ShardLayout(Layout((2,)), (D,), X)), scalar()),
        r"operand 'update' is Dynamic on mesh axis 0",
    ),
    # Offsets are positions, never pending values.
    (
        "Partial offset",
        (t((8,)), t((2,)), make_shard_tensor_type((), i64, mesh=X, attrs=(P("sum"),))),
        r"operand 'offsets\[0\]' carries Partial\(sum\)",
    ),
]


@pytest.mark.parametrize(("case", "args", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, args, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(OP, *args)


def typed_with_literals(dst, update, offsets_node):
    """Type a Call whose offsets are literal Constants (typeinfer_call only builds Vars)."""
    call = Call(OP, (Var("dst", dst), Var("update", update), offsets_node))
    return TypeInferContext().infer(call)


def test_literal_window_in_bounds_types():
    node = Tuple((Constant(6), Constant(12)))
    assert typed_with_literals(t((8, 16)), t((2, 4)), node) == t((8, 16))


@pytest.mark.parametrize(
    ("node", "match"),
    [
        # hir §1.3 InsertSlice: a literal offset that places an out-of-bounds window fails
        # typeinfer, naming the axis.
        (Tuple((Constant(6), Constant(13))), r"window \[13, 13 \+ 4\) on axis 1 is outside"),
        (Tuple((Constant(7), Var("o", t((), i64)))), r"window \[7, 7 \+ 2\) on axis 0"),
        # ... and a negative one.
        (Tuple((Constant(0), Constant(-1))), r"window \[-1, -1 \+ 4\) on axis 1"),
        (Tuple((Constant(np.int32(-2)), Constant(0))), r"on axis 0"),
    ],
)
def test_literal_window_out_of_bounds_fails_typeinfer(node, match):
    with pytest.raises(VerifyError, match=match):
        typed_with_literals(t((8, 16)), t((2, 4)), node)


def test_literal_bare_scalar_offset_is_checked():
    with pytest.raises(VerifyError, match=r"window \[7, 7 \+ 2\) on axis 0 is outside"):
        typed_with_literals(t((8,)), t((2,)), Constant(7))


def test_literal_against_a_symbolic_extent_checks_the_sign_only():
    assert typed_with_literals(t((N,)), t((2,)), Constant(40)) == t((N,))
    with pytest.raises(VerifyError, match=r"window \[-3"):
        typed_with_literals(t((N,)), t((2,)), Constant(-3))


def test_no_affine_relation_and_surface():
    assert ACCESS_RELATION.lookup(InsertSlice) is NO_AFFINE_RELATION
    assert surface_entry("insert_slice").op_class is InsertSlice


# ---------------------------------------------------------------------------------------------
# Reference kernel

KERNEL = EVAL.lookup(InsertSlice)


def test_writes_the_window():
    dst = np.zeros((3, 4), np.float32)
    update = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    out = KERNEL(OP, (dst, update, (np.int64(1), np.int32(2))), t((3, 4)))
    expected = np.array([[0, 0, 0, 0], [0, 0, 1, 2], [0, 0, 3, 4]], np.float32)
    np.testing.assert_array_equal(out, expected)
    assert not dst.any(), "the kernel must not write into its input"


def test_rank1_scalar_offset():
    out = KERNEL(OP, (np.arange(5), np.array([9, 9]), np.array(3)), t((5,), i64))
    np.testing.assert_array_equal(out, [0, 1, 2, 9, 9])


@pytest.mark.parametrize("offsets", [(np.int64(2), np.int64(3)), (np.int64(-1), np.int64(0))])
def test_runtime_window_out_of_bounds_is_an_eval_error(offsets):
    # hir §1.3 InsertSlice: a runtime offset is checked at eval time.
    with pytest.raises(EvalError, match="InsertSlice: the window"):
        KERNEL(OP, (np.zeros((3, 4)), np.ones((2, 2)), offsets), t((3, 4)))


def test_wrong_offset_count_is_an_eval_error():
    with pytest.raises(EvalError, match="1 offsets for a rank-2 dst"):
        KERNEL(OP, (np.zeros((3, 4)), np.ones((2, 2)), (np.int64(0),)), t((3, 4)))
