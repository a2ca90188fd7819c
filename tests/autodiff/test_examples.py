"""The examples differentiate (issue 25 item 2: the ops examples/mlp.py, transformer_block.py,
megatron_mlp.py and mesh_2d.py use have rules; item 4: the tile loops of tiled_matmul.py,
online_softmax.py and flash_attention.py): the gradient of loss = sum(f(...) * R) with respect to
every float parameter type-checks, gives every parameter's gradient its parameter's type, and on
the mesh simulator reproduces the directional derivatives of the forward program: central
differences on the evaluator of the example's float64 twin (its source with f32 spelled
f64), whose gradient the float32 example's must also match."""

from pathlib import Path

import numpy as np
import pytest

from tilefoundry import grad
from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.evaluator import evaluate
from tilefoundry.frontend import parse_source
from tilefoundry.ir.core import Call, Constant, Var
from tilefoundry.ir.hir import Function
from tilefoundry.passes import verify

pytestmark = pytest.mark.slow  # whole example programs, each differentiated twice

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PROGRAMS = [
    ("mlp", "mlp"),
    ("transformer_block", "transformer_block"),
    ("megatron_mlp", "megatron_mlp"),
    ("mesh_2d", "mesh_2d"),
    ("tiled_matmul", "tiled_matmul"),  # tile loops (issue 25 item 4): a register accumulator,
    ("online_softmax", "online_softmax"),  # a running max and sum,
    ("flash_attention", "flash_attention"),  # and both, over smem tiles
]


def _loss(fn: Function, projection: np.ndarray) -> Function:
    params = tuple(Var(p.name, p.type) for p in fn.params)
    out = tf.mul(Call(fn, params), Constant(projection))
    body = tf.reduce(out, axes=tuple(range(out.type.rank)), keepdim=False, kind="sum")
    return Function(f"loss_{fn.name}", params, body, TypeInferContext().infer(body))


def _parsed(file: str, name: str, *, wide: bool) -> Function:
    source = (EXAMPLES / f"{file}.py").read_text(encoding="utf-8")
    if wide:
        source = source.replace('"f32"', '"f64"').replace("np.float32", "np.float64")
    return parse_source(source, f"{file}.py")[name]


def _gradient(fn: Function, projection: np.ndarray) -> tuple[Function, Function, tuple]:
    loss = _loss(fn, projection.astype(fn.return_type.dtype.to_numpy()))
    argnums = tuple(i for i, p in enumerate(fn.params) if p.type.dtype.is_float)
    gradient = grad(loss, argnums=argnums)
    verify(gradient)
    return loss, gradient, argnums


@pytest.mark.parametrize(("file", "name"), PROGRAMS, ids=[p[1] for p in PROGRAMS])
def test_the_example_differentiates(file, name):
    fn, twin = _parsed(file, name, wide=False), _parsed(file, name, wide=True)
    rng = np.random.default_rng(1)
    projection = rng.standard_normal(tuple(int(d) for d in fn.return_type.shape))
    _, gradient, argnums = _gradient(fn, projection)
    loss, twin_gradient, _ = _gradient(twin, projection)
    for index, field in zip(argnums, gradient.return_type.fields, strict=True):
        param = fn.params[index].type
        if param.layout is not None:
            assert field.layout.attrs == param.layout.attrs, fn.params[index].name
    arrays = [rng.standard_normal(tuple(int(d) for d in p.type.shape)) * 0.5 for p in twin.params]
    want = evaluate(twin_gradient, *arrays)
    got = evaluate(gradient, *(a.astype(np.float32) for a in arrays))
    eps = 1e-6
    for index, g, w in zip(argnums, got, want, strict=True):
        scale = float(np.max(np.abs(w)))
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale, err_msg=f"input {index}")
        direction = rng.standard_normal(arrays[index].shape)
        moved = [list(arrays), list(arrays)]
        moved[0][index] = arrays[index] + eps * direction
        moved[1][index] = arrays[index] - eps * direction
        plus, minus = (float(evaluate(loss, *m)) for m in moved)
        numeric = (plus - minus) / (2 * eps)
        analytic = float(np.sum(w * direction))
        assert abs(numeric - analytic) <= 1e-6 * max(abs(analytic), 1.0), (index, numeric)
