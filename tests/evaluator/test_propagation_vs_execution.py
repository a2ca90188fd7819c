"""Shard propagation agrees with execution (semantic-analysis §3.2, DESIGN §4.12).

For random permutation/projection relations (Transpose, broadcasting Binary, Reduce over random
axes, MatMul) and random per-mesh-axis input states that typeinfer accepts, the output layout
typeinfer derives is what the mesh simulation produces: the per-device results, completed through
that layout (Splits gathered, Partials reduced with the claimed reduction, Broadcast replicas
checked equal, which a result typed plain or fully Broadcast gets when the simulation collapses
it to its one global value), equal the unsharded result.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tilefoundry.analysis import typeinfer_call
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import MeshValue, gather, run_op
from tilefoundry.evaluator.validation_inputs import Domain, draw_truth, place
from tilefoundry.evaluator.values import is_replicated_type
from tilefoundry.ir.hir.math import Binary, BinaryKind
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.hir.tensor import Reduce, ReduceKind, Transpose
from tilefoundry.ir.types import f32, make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, Split, make_mesh

MESHES = (make_mesh((4,), ("x",)), make_mesh((2,), ("x",)), make_mesh((2, 2), ("a", "b")))
EXTENTS = st.sampled_from((1, 2, 4, 8))


@st.composite
def transposes(draw):
    shape = tuple(draw(st.lists(EXTENTS, min_size=1, max_size=3)))
    perm = tuple(draw(st.permutations(range(len(shape)))))
    return Transpose(perm=perm), (shape,)


@st.composite
def broadcasting_binaries(draw):
    """Torch broadcasting: each operand a suffix of the output shape with some extents 1."""
    out = tuple(draw(st.lists(EXTENTS, min_size=1, max_size=3)))

    def operand():
        rank = draw(st.integers(1, len(out)))
        return tuple(1 if draw(st.booleans()) else e for e in out[len(out) - rank :])

    lhs, rhs = operand(), operand()
    assume(np.broadcast_shapes(lhs, rhs) == out)
    kind = draw(st.sampled_from((BinaryKind.ADD, BinaryKind.SUB, BinaryKind.MUL, BinaryKind.MAX)))
    return Binary(kind=kind), (lhs, rhs)


@st.composite
def reductions(draw):
    shape = tuple(draw(st.lists(EXTENTS, min_size=1, max_size=3)))
    axes = draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))
    kind = draw(st.sampled_from((ReduceKind.SUM, ReduceKind.MAX, ReduceKind.MEAN)))
    return Reduce(axes=tuple(sorted(axes)), keepdim=draw(st.booleans()), kind=kind), (shape,)


@st.composite
def matmuls(draw):
    m, k, n = draw(EXTENTS), draw(EXTENTS), draw(EXTENTS)
    batch = tuple(draw(st.lists(EXTENTS, max_size=1)))
    return MatMul(), ((*batch, m, k), (*batch, k, n))


STATES = (B, B, Split, Split, P("sum"), P("max"), P("min"))


@st.composite
def placed_calls(draw):
    """An op, a mesh and operand types in random per-mesh-axis states that typeinfer accepts."""
    op, shapes = draw(st.one_of(transposes(), broadcasting_binaries(), reductions(), matmuls()))
    mesh = draw(st.sampled_from(MESHES))
    types = []
    for shape in shapes:
        attrs = []
        for _ in range(mesh.rank):
            state = draw(st.sampled_from(STATES))
            attrs.append(Split(draw(st.integers(0, len(shape) - 1))) if state is Split else state)
        try:
            types.append(make_shard_tensor_type(shape, f32, mesh=mesh, attrs=tuple(attrs)))
        except VerifyError:
            assume(False)
    try:
        claimed = typeinfer_call(op, *types)
    except VerifyError:
        assume(False)
    return op, mesh, types, claimed


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(call=placed_calls(), seed=st.integers(0, 2**16))
def test_the_derived_output_layout_is_what_execution_produces(call, seed):
    op, mesh, types, claimed = call
    rng = np.random.default_rng(seed)
    values = [draw_truth(t.shape, np.dtype(np.float32), Domain("real"), rng) for t in types]
    plain = [make_tensor_type(t.shape, f32) for t in types]
    want = run_op(op, plain, typeinfer_call(op, *plain), values)
    args = [
        MeshValue(mesh, t, t.shape, place(v, t, index, rng))
        for index, (t, v) in enumerate(zip(types, values, strict=True))
    ]
    result = run_op(op, types, claimed, args)
    if is_replicated_type(claimed):
        # DESIGN §4.12: a plain or fully Broadcast result is one global value, whose replicas
        # the simulation collapsed after checking that they agree.
        assert isinstance(result, np.ndarray)
        got = result
    else:
        assert isinstance(result, MeshValue) and result.type == claimed
        got = gather(result, "propagation test", complete_partials=True)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * scale)
