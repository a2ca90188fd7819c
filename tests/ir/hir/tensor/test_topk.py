"""TopK (hir §1.3 TopK): typeinfer case table, relation, and the reference kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tilefoundry.analysis import typeinfer_call
from tilefoundry.analysis.access_relation import reduction_dims
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.hir.tensor.topk import TopK
from tilefoundry.ir.types import (
    DimVar,
    TupleType,
    bf16,
    dim_min,
    f32,
    i32,
    i64,
    make_shard_tensor_type,
    make_tensor_type,
)
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, make_mesh
from tilefoundry.rules import ACCESS_RELATION, EVAL, surface_entry

X = make_mesh((4,), ("x",))
XY = make_mesh((2, 4), ("x", "y"))
N = DimVar("N", 1, 64)
CTX = DimVar("CTX", 1, 4096)
BATCH = DimVar("BATCH", 1, 8)
OTHER = DimVar("OTHER", 1, 8)


t = make_tensor_type  # the shorthand the case tables use


def pair(shape, dtype=f32, storage="gmem", layout=None):
    """hir §1.3 TopK: (values, indices); values keep x's dtype, indices are i64."""
    return TupleType((t(shape, dtype, storage, layout), t(shape, i64, storage, layout)))


def sharded(shape, mesh, *attrs):
    """Split(i) names *logical* axis i here (make_shard_tensor_type)."""
    return make_shard_tensor_type(shape, f32, mesh=mesh, attrs=attrs)


def shard(layout_shape, stride, attrs, mesh):
    return ShardLayout(Layout(layout_shape, stride), attrs, mesh)


ACCEPT = [
    # hir §1.3 TopK: both results shrink the selected axis to k.
    ("last axis", TopK(k=3), t((4, 10)), pair((4, 3))),
    ("axis 0", TopK(k=2, axis=0), t((4, 10), bf16), pair((2, 10), bf16)),
    ("negative axis", TopK(k=2, axis=-2), t((4, 10), i32), pair((2, 10), i32)),
    ("k = 0", TopK(k=0), t((4, 10)), pair((4, 0))),
    ("k = length", TopK(k=10, largest=False, sorted=False), t((10,)), pair((10,))),
    ("storage kept", TopK(k=1), t((4,), storage="rmem"), pair((1,), storage="rmem")),
    # hir §1.3 TopK: a dynamic k derived from a context-length DimVar is the selected axis's
    # symbolic length; against a symbolic axis it is not checked (fails open).
    (
        "dim_min(512, CTX // 4)",
        TopK(k=dim_min(512, CTX // 4)),
        t((BATCH, CTX)),
        pair((BATCH, dim_min(512, CTX // 4))),
    ),
    # k's static upper bound (DimVar.hi - 1 through min) is within a static axis length.
    ("bounded symbolic k", TopK(k=dim_min(8, N)), t((N, 16)), pair((N, dim_min(8, N)))),
    ("DimVar k bounded", TopK(k=N), t((N, 63)), pair((N, N))),
    # An upper bound that does not compose (through a subtraction) fails open.
    ("unbounded symbolic k", TopK(k=N - 1), t((N, 16)), pair((N, N - 1))),
    # A static k against a symbolic axis length is not checked at typeinfer.
    ("static k, symbolic axis", TopK(k=5), t((N,)), pair((5,))),
    # hir §1.3 TopK: a ShardLayout output keeps the non-selected sharding; only the selected
    # axis's layout extent becomes k.
    (
        "split kept on the other axis",
        TopK(k=4),
        sharded((8, 16), X, S(0)),
        pair((8, 4), layout=shard((4, 2, 4), (8, 4, 1), (S(0),), X)),
    ),
    (
        "two-axis mesh, replicated axis kept",
        TopK(k=3, axis=0),
        sharded((8, 16), XY, B, S(1)),
        pair((3, 16), layout=shard((3, 4, 4), (16, 4, 1), (B, S(1)), XY)),
    ),
    (
        "symbolic k on a sharded input",
        TopK(k=dim_min(2, N)),
        sharded((8, N), X, S(0)),
        pair(
            (8, dim_min(2, N)),
            layout=shard((4, 2, dim_min(2, N)), (2 * dim_min(2, N), dim_min(2, N), 1), (S(0),), X),
        ),
    ),
    ("fully Broadcast shard is replicated", TopK(k=2), sharded((8, 16), X, B), pair((8, 2))),
]


@pytest.mark.parametrize(("case", "op", "x", "expected"), ACCEPT, ids=[c[0] for c in ACCEPT])
def test_accepts(case, op, x, expected):
    assert typeinfer_call(op, x) == expected


REJECT = [
    # hir §1.3 TopK: k MUST satisfy the ShapeDim contract; any other value fails typeinfer.
    ("float k", TopK(k=1.5), t((4,)), r"TopK: k: expected an int, DimVar or dim expression"),
    ("bool k", TopK(k=True), t((4,)), r"TopK: k: a bool is not a dimension"),
    ("string k", TopK(k="3"), t((4,)), r"TopK: k: expected an int"),
    # hir §1.3 TopK: k MUST be non-negative (checked whenever k is static).
    ("negative k", TopK(k=-1), t((4,)), r"TopK: k must be non-negative, got -1"),
    # hir §1.3 TopK: k MUST NOT exceed the selected-axis length (static axis, static k).
    ("k > length", TopK(k=5), t((3, 4)), r"TopK: k = 5 can reach 5, more than the length 4"),
    # ... or a symbolic k whose statically-derivable upper bound is known.
    ("k bound > length", TopK(k=N // 2), t((N, 16)), r"TopK: k = N//2 can reach 31, more than"),
    ("k bound via min", TopK(k=dim_min(N, 40)), t((N, 16)), r"can reach 40"),
    # hir §1.3 TopK: a symbolic k's DimVars MUST be resolvable from x's own shape.
    ("k from another arg", TopK(k=OTHER), t((N, 16)), r"DimVar OTHER, which does not appear"),
    ("axis out of range", TopK(k=1, axis=2), t((4, 4)), r"TopK: axis 2 is out of range"),
    ("scalar x", TopK(k=0), t(()), r"TopK: x is a scalar"),
    # hir §1.3 TopK: the selected axis MUST NOT be Split-sharded.
    (
        "split selected axis",
        TopK(k=2),
        sharded((8, 16), X, S(1)),
        r"TopK: the selected axis 1 is Split on mesh axis 0 \('x'\).*reshard\(x, \.\.\.\) to "
        r"Broadcast on mesh axis 0 \('x'\)",
    ),
    (
        "split selected axis, second mesh axis",
        TopK(k=2, axis=0),
        sharded((8, 16), XY, S(1), S(0)),
        r"selected axis 0 is Split on mesh axis 1 \('y'\)",
    ),
    # hir §1.3 TopK: any Partial input is rejected regardless of reduction or k.
    (
        "Partial(sum)",
        TopK(k=2),
        sharded((8, 16), X, P("sum")),
        r"TopK: operand 'x' carries Partial\(sum\) on mesh axis 0 \('x'\), and indices name",
    ),
    ("Partial(max)", TopK(k=2), sharded((8, 16), XY, S(0), P("max")), r"Partial\(max\) on mesh"),
    ("Partial(min), k = 0", TopK(k=0), sharded((8, 16), X, P("min")), r"Partial\(min\)"),
]


@pytest.mark.parametrize(("case", "op", "x", "match"), REJECT, ids=[c[0] for c in REJECT])
def test_rejects(case, op, x, match):
    with pytest.raises(VerifyError, match=match):
        typeinfer_call(op, x)


def test_surface():
    entry = surface_entry("topk")
    assert entry.op_class is TopK and entry.fixed == {}


def test_relation_reads_the_whole_selected_axis():
    relations = ACCESS_RELATION.lookup(TopK)(TopK(k=2, axis=0), (t((4, 10)),))
    # Domain = x's two coordinates plus the output position on axis 0; x's axis-0 coordinate
    # reaches neither output, so every output position depends on the whole axis.
    assert relations.domain_rank == 3
    assert len(relations.outputs) == 2
    assert reduction_dims(relations) == frozenset({0})


# ---------------------------------------------------------------------------------------------
# Reference kernel

KERNEL = EVAL.lookup(TopK)


def run(op, x, shape, dtype=f32):
    return KERNEL(op, (x,), pair(shape, dtype))


def test_largest_breaks_ties_by_lower_index():
    values, indices = run(TopK(k=3), np.array([3.0, 1.0, 3.0, 2.0], np.float32), (3,))
    np.testing.assert_array_equal(values, [3.0, 3.0, 2.0])
    np.testing.assert_array_equal(indices, [0, 2, 3])
    assert indices.dtype == np.int64 and values.dtype == np.float32


def test_smallest_breaks_ties_by_lower_index():
    x = np.array([1.0, 1.0, 0.0, 5.0], np.float32)
    values, indices = run(TopK(k=3, largest=False), x, (3,))
    np.testing.assert_array_equal(values, [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(indices, [2, 0, 1])


def test_unsorted_returns_the_sorted_selection():
    values, indices = run(TopK(k=2, sorted=False), np.array([1, 9, 4], np.int32), (2,), i32)
    np.testing.assert_array_equal(values, [9, 4])
    np.testing.assert_array_equal(indices, [1, 2])


def test_axis_0_of_a_matrix():
    x = np.array([[1, 8], [7, 2], [4, 6]], np.int32)
    values, indices = run(TopK(k=2, axis=0), x, (2, 2), i32)
    np.testing.assert_array_equal(values, [[7, 8], [4, 6]])
    np.testing.assert_array_equal(indices, [[1, 0], [2, 2]])


def test_bf16_values_keep_their_dtype():
    x = np.array([0.5, -1.0, 2.0], ml_dtypes.bfloat16)
    values, indices = run(TopK(k=1), x, (1,), bf16)
    assert values.dtype == ml_dtypes.bfloat16 and float(values[0]) == 2.0
    np.testing.assert_array_equal(indices, [2])


def test_symbolic_k_resolves_from_x_extents():
    k = dim_min(2, N)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    values, indices = KERNEL(TopK(k=k), (x,), pair((N, k)))
    np.testing.assert_array_equal(values, [[3, 2], [7, 6], [11, 10]])
    np.testing.assert_array_equal(indices, [[3, 2]] * 3)


def test_k_beyond_the_axis_is_an_eval_error():
    with pytest.raises(EvalError, match=r"TopK: k = 5 is outside \[0, 3\]"):
        run(TopK(k=5), np.zeros(3, np.float32), (5,))


def test_unresolvable_k_is_an_eval_error():
    with pytest.raises(EvalError, match="TopK: cannot resolve k"):
        KERNEL(TopK(k=CTX // 4), (np.zeros((2, 8), np.float32),), pair((2, CTX // 4)))
