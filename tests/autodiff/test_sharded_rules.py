"""VJP rules on simulated devices (issue 25 items 3 and 5, DESIGN §4.12, §4.18): for every op with
a VJP rule, each of its validator samples, and a seeded choice of per-mesh-axis input states
(Broadcast, Split on each logical axis, Partial(sum)) that the forward's typeinfer accepts, the
backward program

- is built (the forward types, so the backward must type too: JAX's users file bugs where it
  does not), and
- evaluated on the mesh simulator (global inputs scattered over the devices, Partial parameters
  as uneven addends) equals the unsharded backward program on the same global values.

The states and values come from the sharding-rule validator's own sample model
(`VALIDATION_SAMPLES`, `validation_inputs.draw_truth`), so a new op's samples are checked here
as soon as its rule lands.
"""

import itertools
import zlib

import numpy as np
import pytest

import tilefoundry.ir.hir  # noqa: F401  (registers every op)
from tilefoundry import grad, vjp
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.errors import VerifyError
from tilefoundry.evaluator import evaluate
from tilefoundry.evaluator.validation_inputs import draw_truth
from tilefoundry.ir.core import Call, Tuple, Var
from tilefoundry.ir.core.graph import iter_nodes
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import make_shard_tensor_type, make_tensor_type
from tilefoundry.ir.types.shard import B, P, Split, make_mesh
from tilefoundry.passes import verify
from tilefoundry.rules import VALIDATION_SAMPLES, VJP
from tilefoundry.sharding.shard_reading import canonical_splits

MESHES = (make_mesh((4,), ("x",)), make_mesh((2, 2), ("a", "b")))
NOT_DIFFERENTIATED = {"RoPE": ("cos_cache", "sin_cache")}
"""Inputs a rule refuses to differentiate (docs/autodiff.md), left out of argnums."""
COMBINATIONS = {1: 10, 2: 6}
"""Input-state combinations per sample, by mesh rank (a seeded choice among those accepted)."""


def _slots(sample):
    return [f for o in sample.operands for f in (o.fields if hasattr(o, "fields") else (o,))]


def _states(slot, mesh):
    if slot.states == "plain":
        return [None]
    placed = [B, *(Split(k) for k in range(len(slot.shape)))]
    per_axis = placed + ([P("sum")] if slot.states == "all" else [])
    return [None, *itertools.product(per_axis, repeat=mesh.rank)]


def _type(slot, attrs, mesh):
    if attrs is None:
        return make_tensor_type(slot.shape, slot.dtype)
    return make_shard_tensor_type(slot.shape, slot.dtype, mesh=mesh, attrs=attrs)


def _program(sample, op, types):
    params = tuple(Var(f"a{i}", t) for i, t in enumerate(types))
    leaves, args = list(params), []
    for operand in sample.operands:
        if hasattr(operand, "fields"):
            args.append(Tuple(tuple(leaves.pop(0) for _ in operand.fields)))
        else:
            args.append(leaves.pop(0))
    body = Call(op, tuple(args))
    return Function("f", params, body, TypeInferContext().infer(body))


def _argnums(sample, op, types):
    """Every float input except the ones the op's rule refuses."""
    names = [
        name
        for operand, name in zip(sample.operands, type(op).inputs(), strict=True)
        for name in ([name] * len(operand.fields) if hasattr(operand, "fields") else [name])
    ]
    skipped = NOT_DIFFERENTIATED.get(type(op).__name__, ())
    return tuple(
        i for i, (t, n) in enumerate(zip(types, names, strict=True))
        if t.dtype.is_float and n not in skipped
    )  # fmt: skip


def _differentiable(type_):
    fields = getattr(type_, "fields", None)
    if fields is not None:
        return any(_differentiable(f) for f in fields)
    return type_.dtype.is_float


def _cases():
    for op_class in VJP.registered():
        if not VALIDATION_SAMPLES.has(op_class):
            continue
        samples = VALIDATION_SAMPLES.lookup(op_class)()
        if isinstance(samples, str):
            continue
        for index, sample in enumerate(s for s in samples if s.ci):
            plain = [make_tensor_type(s.shape, s.dtype) for s in _slots(sample)]
            if not _differentiable(_program(sample, sample.op_for(MESHES[0]), plain).return_type):
                continue  # an integer or bool output (a comparison): no cotangent flows
            for mesh in MESHES:
                label = f"{op_class.__name__}[{sample.label or index}] mesh {mesh.shape}"
                yield pytest.param(sample, mesh, id=label)


def _accepted(sample, mesh, rng):
    """Seeded input-state combinations the forward typeinfer accepts (at least one sharded)."""
    slots = _slots(sample)
    combos = list(itertools.product(*(_states(s, mesh) for s in slots)))
    rng.shuffle(combos)
    chosen = []
    op = sample.op_for(mesh)
    for combo in combos:
        if all(a is None for a in combo):
            continue
        try:
            types = [_type(s, a, mesh) for s, a in zip(slots, combo, strict=True)]
            fn = _program(sample, op, types)
        except VerifyError:
            continue
        if _differentiable(fn.return_type):
            chosen.append((combo, fn))
        if len(chosen) == COMBINATIONS[mesh.rank]:
            break
    return chosen


def _leaves(value):
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]


@pytest.mark.parametrize(("sample", "mesh"), list(_cases()))
def test_the_sharded_backward_equals_the_unsharded_backward(sample, mesh):
    rng = np.random.default_rng(zlib.crc32(repr((sample.label, mesh.shape)).encode()))
    slots = _slots(sample)
    op = sample.op_for(mesh)
    plain = _program(sample, op, [make_tensor_type(s.shape, s.dtype) for s in slots])
    values = [draw_truth(s.shape, s.dtype.to_numpy(), s.domain, rng) for s in slots]
    argnums = _argnums(sample, op, [p.type for p in plain.params])
    reference = vjp(plain, argnums=argnums)
    outputs = _leaves(evaluate(plain, *values))
    cts = [rng.standard_normal(o.shape).astype(o.dtype) for o in outputs if o.dtype.kind == "f"]
    _, want = evaluate(reference, *values, *cts)
    checked = 0
    for combo, fn in _accepted(sample, mesh, rng):
        states = ", ".join("plain" if a is None else str(a) for a in combo)
        try:
            backward = vjp(fn, argnums=argnums)
            verify(backward)
        except VerifyError as err:
            pytest.fail(f"inputs ({states}): the forward types but its backward does not: {err}")
        _, got = evaluate(backward, *values, *cts, complete_partials=True)
        for i, (g, w) in enumerate(zip(_leaves(got), _leaves(want), strict=True)):
            scale = max(1.0, float(np.max(np.abs(w))))
            np.testing.assert_allclose(
                g, w, rtol=2e-4, atol=2e-4 * scale, err_msg=f"inputs ({states}): cotangent {i}"
            )
        checked += 1
    assert checked, "no sharded input state of this sample types"


SEQ = make_mesh((4,), ("tp",))


@pytest.mark.parametrize(
    "build",
    [
        lambda x, w: tf.matmul(x, w),
        lambda x, w: tf.rms_norm(x, tf.reduce(w, axes=(1,), keepdim=False, kind="sum")),
    ],
    ids=["x @ w", "rms_norm"],
)
def test_a_sequence_split_backward_keeps_every_layout_canonical(build):
    """The SPMD exit reads only canonical layouts (each Split the outermost factor of its
    logical axis): the backward of a (batch, seq @ tp, hidden) activation must not merge the
    split seq axis into an inner factor (MatMul's weight gradient, sum_to's batch sums)."""
    x = Var("x", make_shard_tensor_type((2, 8, 16), mesh=SEQ, attrs=(Split(1),)))
    w = Var("w", make_tensor_type((16, 16)))
    body = tf.reduce(build(x, w), axes=(0, 1, 2), keepdim=False, kind="sum")
    fn = Function("f", (x, w), body, TypeInferContext().infer(body))
    backward = grad(fn, argnums=(0, 1))
    for node in iter_nodes(backward.body):
        canonical_splits(node.type, "test", "the SPMD exit")  # raises on an inner-factor split
    rng = np.random.default_rng(0)
    values = rng.standard_normal((2, 8, 16)), rng.standard_normal((16, 16))
    twin_x = Var("x", make_tensor_type((2, 8, 16)))
    twin_body = tf.reduce(build(twin_x, w), axes=(0, 1, 2), keepdim=False, kind="sum")
    twin = Function("g", (twin_x, w), twin_body, TypeInferContext().infer(twin_body))
    got = evaluate(backward, *[v.astype(np.float32) for v in values])
    want = evaluate(grad(twin, argnums=(0, 1)), *[v.astype(np.float32) for v in values])
    for g, t in zip(got, want, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(t))))
