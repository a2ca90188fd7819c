"""Where the backward program communicates (docs/autodiff.md "Where the backward program
communicates", DESIGN §4.18): fan-out contributions in different states, a rule asking for a
completed value, and returned gradients, each checked by the backward Reshards' collectives (in
`show`'s words) and by the values against numpy."""

import numpy as np

from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.autodiff import Builder
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.inspect.shard_view import reshard_collectives
from tilefoundry.ir.core import Call, Var
from tilefoundry.ir.core.graph import post_order
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.sharding import Reshard
from tilefoundry.ir.types import make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, S, make_mesh
from tilefoundry.passes import verify

MESH = make_mesh((4,), ("x",))


def _sharded(shape, *attrs):
    return make_shard_tensor_type(shape, mesh=MESH, attrs=attrs)


def _reshard_collectives(root) -> list[str]:
    return [
        text
        for node in post_order((root,))  # in program order
        if isinstance(node, Call) and isinstance(node.target, Reshard)
        for text in reshard_collectives(node.args[0].type, node.type)
    ]


def test_a_pending_contribution_next_to_a_split_one_is_reduce_scattered_into_it():
    """x feeds a row-split w1 (its cotangent is split along K) and a column-split w2 (its
    cotangent is a pending sum): the two meet as a reduce-scatter into the Split, not an
    all-reduce; the returned gradient of the replicated x then gathers once."""
    x = Var("x", make_tensor_type((4, 8)))
    w1 = Var("w1", _sharded((8, 6), S(0)))
    w2 = Var("w2", _sharded((8, 8), S(1)))
    first = tf.reshard(tf.matmul(x, w1), layout=_sharded((4, 6), B).layout, storage="gmem")
    second = tf.matmul(x, w2)
    body = tf.add(
        tf.reduce(first, axes=(0, 1), keepdim=False, kind="sum"),
        tf.reduce(second, axes=(0, 1), keepdim=False, kind="sum"),
    )
    fn = Function("f", (x, w1, w2), body, TypeInferContext().infer(body))
    gradient = grad(fn)
    verify(gradient)
    assert _reshard_collectives(gradient.body) == [  # (the forward's all-reduce is dead)
        "x: reduce-scatter(sum, dim 1)",
        "x: all-gather(dim 1)",
    ]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 6), (8, 8))]
    _, a, b = (a.astype(np.float64) for a in arrays)
    want = np.ones((4, 6)) @ a.T + np.ones((4, 8)) @ b.T
    np.testing.assert_allclose(evaluate(gradient, *arrays), want, rtol=1e-5)


def test_a_rule_may_ask_for_a_completed_value():
    """`ad.complete` (for a rule that must read a pending value) is the all-reduce, and only
    on the mesh axes that pend."""
    value = Var("v", _sharded((4, 8), P("sum")))
    ad = Builder(TypeInferContext())
    completed = ad.complete(value)
    assert completed.type.layout.attrs == (B,)
    assert _reshard_collectives(completed) == ["x: all-reduce(sum)"]
    already = Var("w", _sharded((4, 8), S(0)))
    assert ad.complete(already) is already
