"""The transpose of each Reshard (issue 25 item 3; the table of docs/autodiff.md): for a forward
Reshard between two states of one mesh axis, and the cotangent state that arrives at its result,
what the transform inserts (the backward Reshards' collectives, in `show`'s words) and that the
backward program on the simulator equals the numpy transpose of the same math."""

import numpy as np
import pytest

from tilefoundry import vjp
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.inspect.shard_view import reshard_collectives
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.sharding import Reshard
from tilefoundry.ir.types import make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.passes import verify

MESH = make_mesh((4,), ("x",))
SHAPE = (8, 8)


def _type(attrs):
    if attrs is None:
        return make_tensor_type(SHAPE)
    return make_shard_tensor_type(SHAPE, mesh=MESH, attrs=attrs)


def _program(source, target, pending_cotangent: bool):
    """y = reshard(x: source -> target); with `pending_cotangent`, y @ w for a column-split w,
    so the cotangent arriving at y is a pending sum (it contracts w's split columns)."""
    x = Var("x", _type(source))
    params = [x]
    y = tf.reshard(x, layout=_type(target).layout, storage="gmem")
    if pending_cotangent:
        w = Var("w", make_shard_tensor_type(SHAPE, mesh=MESH, attrs=(S(1),)))
        params.append(w)
        y = tf.matmul(y, w)
    return Function("f", tuple(params), y, TypeInferContext().infer(y))


def _backward_collectives(fn, backward) -> list[str]:
    forward = {n for n in iter_nodes(fn.body) if isinstance(n, Call)}
    return [
        text
        for node in iter_nodes(backward.body)
        if isinstance(node, Call) and isinstance(node.target, Reshard) and node not in forward
        for text in reshard_collectives(node.args[0].type, node.type)
    ]


ROWS = [
    # (forward source, forward target, cotangent arrives pending, what the transform inserts)
    ((B,), (S(0),), False, ["x: all-gather(dim 0)"]),  # at the replicated parameter
    ((S(0),), (B,), False, ["x: slice (local, no communication)"]),
    ((S(0),), (B,), True, ["x: reduce-scatter(sum, dim 0)"]),
    ((P("sum"),), (B,), False, []),
    ((P("sum"),), (B,), True, ["x: all-reduce(sum)"]),
    ((P("sum"),), (S(0),), False, ["x: all-gather(dim 0)"]),
    ((S(0),), (S(1),), False, ["x: all-to-all(dim 1 -> dim 0)"]),
]


@pytest.mark.parametrize(
    ("source", "target", "pending", "inserted"),
    ROWS,
    ids=[f"{r[0]}->{r[1]}{' pending' if r[2] else ''}" for r in ROWS],
)
def test_the_transpose_of_a_reshard(source, target, pending, inserted):
    fn = _program(source, target, pending)
    backward = vjp(fn)
    verify(backward)
    assert _backward_collectives(fn, backward) == inserted
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(SHAPE).astype(np.float32) for _ in fn.params]
    ct = rng.standard_normal(SHAPE).astype(np.float32)
    _, got = evaluate(backward, *arrays, ct)
    if pending:
        x, w = (a.astype(np.float64) for a in arrays)
        want = (ct @ w.T, x.T @ ct)
    else:
        want = (ct,)
    for g, t in zip(got, want, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(t))))
