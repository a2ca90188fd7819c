"""The VJP rule cases: op x shapes / attributes, each with the same math written in jax.numpy.

A case builds its forward program from typed parameters with the DSL's own `tf` namespace and
names an independent jax spelling of the same math; `test_rules.py` checks the transform's VJP of
every case against central finite differences in float64 on the evaluator and against
`jax.vjp`. Inputs are drawn inside each op's smooth domain (away from relu's and abs's kink,
positive where a log or a divisor needs it, distinct values for max/min). Integer and bool inputs
are fixed data (an index, a mask): they have no cotangent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.dsl import tf
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.math import Unary, UnaryKind
from tilefoundry.ir.types import DType, make_tensor_type

REAL, POSITIVE, AWAY_FROM_ZERO, TIES = "real", "positive", "away from zero", "ties"


@dataclass(frozen=True)
class Input:
    """A float parameter drawn from `domain`, or fixed integer/bool data (`value`)."""

    shape: tuple[int, ...]
    dtype: str = "f64"
    domain: str = REAL
    value: Any = None


@dataclass(frozen=True)
class Case:
    name: str
    inputs: tuple[Input, ...]
    build: Callable[..., Expr]
    """(*parameter Vars) -> the forward body, built with `tf`."""
    math: Callable[..., Any]
    """(jnp, *arrays) -> the same math in jax.numpy (a tuple for a tuple output)."""
    tolerance: float = 1e-6
    tags: frozenset = field(default_factory=frozenset)
    argnums: tuple[int, ...] | None = None
    """The inputs to differentiate (None: every float input)."""
    step: float = 1e-6
    """The central finite difference's step (larger through a narrow dtype's rounding)."""

    def program(self) -> Function:
        params = tuple(
            Var(f"a{i}", make_tensor_type(inp.shape, DType.from_name(inp.dtype)))
            for i, inp in enumerate(self.inputs)
        )
        body = self.build(*params)
        return Function(self.name.replace(" ", "_"), params, body, TypeInferContext().infer(body))

    def arrays(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        rng = np.random.default_rng(seed)
        out = []
        for inp in self.inputs:
            if inp.value is not None:
                out.append(np.asarray(inp.value, dtype=np.dtype(_NUMPY[inp.dtype])))
                continue
            values = rng.standard_normal(inp.shape)
            if inp.domain == POSITIVE:
                values = 0.5 + np.abs(values)
            elif inp.domain == AWAY_FROM_ZERO:
                values = np.sign(values) * (0.3 + np.abs(values))
            elif inp.domain == TIES:
                values = np.round(values)  # a few integers: many exact ties
            out.append(values.astype(_NUMPY[inp.dtype]))
        return tuple(out)


_NUMPY = {
    "f64": np.float64,
    "f32": np.float32,
    "f16": np.float16,
    "i32": np.int32,
    "i64": np.int64,
    "bool": bool,
}


def _unary(kind: UnaryKind) -> Callable[[Expr], Expr]:
    """A Unary kind without a surface spelling (UnaryKind.RELU is nn.ReLU's `tf.relu`)."""
    return lambda x: _typed(Call(Unary(kind=kind), (x,)))


def _typed(node: Expr) -> Expr:
    TypeInferContext().infer(node)
    return node


def _f(*shape: int, domain: str = REAL, dtype: str = "f64") -> Input:
    return Input(tuple(shape), dtype, domain)


def _rms_norm(jnp, x, w, eps=1e-6):
    return x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * w


def _layer_norm(jnp, x, w, b, eps=1e-5):
    centred = x - jnp.mean(x, -1, keepdims=True)
    return centred / jnp.sqrt(jnp.mean(centred * centred, -1, keepdims=True) + eps) * w + b


def _rope(jnp, x, cos, sin, pos):
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[pos] + rotated * sin[pos]


def _softmax(jnp, x, axis):
    shifted = jnp.exp(x - jnp.max(x, axis=axis, keepdims=True))
    return shifted / jnp.sum(shifted, axis=axis, keepdims=True)


def _gelu(jnp, x):
    return 0.5 * x * (1.0 + jnp.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _erf(jnp, x):
    from jax.scipy.special import erf

    return erf(x)


def _sigmoid(jnp, x):
    return 1.0 / (1.0 + jnp.exp(-x))


def _product_of_fields(pair):
    return tf.mul(tf.tuple_get_item(pair, index=0), tf.tuple_get_item(pair, index=1))


def _topk(jnp, x, k, axis, largest):
    from jax import lax

    moved = jnp.moveaxis(x if largest else -x, axis, -1)
    values = lax.top_k(moved, k)[0]
    return jnp.moveaxis(values if largest else -values, -1, axis)


def _conv2d(jnp, x, w, b, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    from jax import lax

    y = lax.conv_general_dilated(
        x,
        w,
        stride,
        [(p, p) for p in padding],
        rhs_dilation=dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=groups,
    )
    return y + b[None, :, None, None]


def _lax(name):
    """A jax.lax scan (`cumsum`, `cummax`, ...) or `pad`, imported only where jax runs."""

    def call(*args, **kwargs):
        from jax import lax

        return getattr(lax, name)(*args, **kwargs)

    return call


POSITIONS = np.array([3, 0, 5, 1], np.int32)
MASK = np.array([[True, False, True, True], [False, False, True, False]] * 2)
START = np.int32(2)
ROWS = np.array([1, 3, 1, 5], np.int32)
BATCHED_ROWS = np.array([[4, 0, 0, 2], [1, 1, 3, 4]], np.int32)

CASES: tuple[Case, ...] = (
    # ---- Binary (torch broadcasting transposed by summing back) ---------------------------
    Case("add", (_f(4, 8), _f(4, 8)), tf.add, lambda jnp, a, b: a + b),
    Case("add row", (_f(4, 8), _f(8)), tf.add, lambda jnp, a, b: a + b),
    Case("add column", (_f(4, 1), _f(4, 8)), tf.add, lambda jnp, a, b: a + b),
    Case("sub", (_f(2, 4, 8), _f(4, 1)), tf.sub, lambda jnp, a, b: a - b),
    Case("mul", (_f(4, 8), _f(1, 8)), tf.mul, lambda jnp, a, b: a * b),
    Case("mul scalar", (_f(4, 8),), lambda a: tf.mul(a, 3.0), lambda jnp, a: a * 3.0),
    Case(
        "div",
        (_f(4, 8), _f(8, domain=POSITIVE)),
        tf.div,
        lambda jnp, a, b: a / b,
    ),
    Case("maximum", (_f(4, 8), _f(4, 8)), tf.maximum, lambda jnp, a, b: jnp.maximum(a, b)),
    Case("minimum row", (_f(4, 8), _f(8)), tf.minimum, lambda jnp, a, b: jnp.minimum(a, b)),
    Case(
        "maximum ties",  # JAX splits a tie's cotangent evenly between the operands
        (_f(4, 8, domain=TIES), _f(4, 8, domain=TIES)),
        tf.maximum,
        lambda jnp, a, b: jnp.maximum(a, b),
        tags=frozenset({"no finite differences"}),
    ),
    Case(
        "mod",
        (_f(4, 8), _f(4, 8, domain=POSITIVE)),
        tf.mod,
        lambda jnp, a, b: jnp.mod(a, b),
        tags=frozenset({"no finite differences"}),  # jumps where a / b crosses an integer
    ),
    Case(
        "floor_div",
        (_f(4, 8), _f(4, 8, domain=POSITIVE)),
        lambda a, b: tf.add(tf.floor_div(a, b), a),
        lambda jnp, a, b: jnp.floor_divide(a, b) + a,
        tags=frozenset({"no finite differences"}),
    ),
    # ---- Unary -----------------------------------------------------------------------------
    Case("neg", (_f(4, 8),), tf.neg, lambda jnp, x: -x),
    Case("abs", (_f(4, 8, domain=AWAY_FROM_ZERO),), tf.abs, lambda jnp, x: jnp.abs(x)),
    Case("rsqrt", (_f(4, 8, domain=POSITIVE),), tf.rsqrt, lambda jnp, x: 1.0 / jnp.sqrt(x)),
    Case(
        "unary relu",
        (_f(4, 8, domain=AWAY_FROM_ZERO),),
        _unary(UnaryKind.RELU),
        lambda jnp, x: jnp.maximum(x, 0.0),
    ),
    Case("square", (_f(4, 8),), tf.square, lambda jnp, x: x * x),
    Case("exp", (_f(4, 8),), tf.exp, lambda jnp, x: jnp.exp(x)),
    Case("log", (_f(4, 8, domain=POSITIVE),), tf.log, lambda jnp, x: jnp.log(x)),
    Case("exp2", (_f(4, 8),), tf.exp2, lambda jnp, x: jnp.exp2(x)),
    Case("log2", (_f(4, 8, domain=POSITIVE),), tf.log2, lambda jnp, x: jnp.log2(x)),
    Case(
        "ceil and round",
        (_f(4, 8),),
        lambda x: tf.add(tf.add(tf.ceil(x), tf.round(x)), x),
        lambda jnp, x: jnp.ceil(x) + jnp.round(x) + x,
        tags=frozenset({"no finite differences"}),
    ),
    Case("sqrt", (_f(4, 8, domain=POSITIVE),), tf.sqrt, lambda jnp, x: jnp.sqrt(x)),
    Case("expm1", (_f(4, 8),), tf.expm1, lambda jnp, x: jnp.expm1(x)),
    Case("log1p", (_f(4, 8, domain=POSITIVE),), tf.log1p, lambda jnp, x: jnp.log1p(x)),
    Case("erf", (_f(4, 8),), tf.erf, _erf),
    Case(
        "sign and round_half_away",
        (_f(4, 8, domain=AWAY_FROM_ZERO),),
        lambda x: tf.add(tf.add(tf.sign(x), tf.round_half_away(x)), x),
        lambda jnp, x: jnp.sign(x) + jnp.sign(x) * jnp.floor(jnp.abs(x) + 0.5) + x,
        tags=frozenset({"no finite differences"}),
    ),
    Case(
        "pow",
        (_f(4, 8, domain=POSITIVE), _f(4, 8)),
        tf.pow,
        lambda jnp, a, b: a**b,
    ),
    Case(
        "rem",
        (_f(4, 8), _f(4, 8, domain=POSITIVE)),
        tf.rem,
        lambda jnp, a, b: jnp.fmod(a, b),
        tags=frozenset({"no finite differences"}),  # jumps where a / b crosses an integer
    ),
    # ---- MatMul (torch matmul, 1-D promotion, batch broadcasting) ---------------------------
    Case("matmul", (_f(4, 8), _f(8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul vector lhs", (_f(8), _f(8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul vector rhs", (_f(4, 8), _f(8)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul dot", (_f(8), _f(8)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul batched weight", (_f(2, 4, 8), _f(8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul batched", (_f(2, 4, 8), _f(2, 8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul batch broadcast", (_f(1, 4, 8), _f(2, 8, 3)), tf.matmul, lambda j, a, b: a @ b),
    Case("matmul vector batched", (_f(8), _f(2, 8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    Case("matmul rank-2 lhs", (_f(4, 8), _f(2, 8, 3)), tf.matmul, lambda jnp, a, b: a @ b),
    # ---- Reduce -----------------------------------------------------------------------------
    *(
        Case(
            f"reduce {kind} axes {axes} keepdim {keep}",
            (_f(3, 4, 5),),
            lambda x, kind=kind, axes=axes, keep=keep: tf.reduce(
                x, axes=axes, keepdim=keep, kind=kind
            ),
            lambda jnp, x, kind=kind, axes=axes, keep=keep: {
                "sum": jnp.sum,
                "mean": jnp.mean,
                "max": jnp.max,
                "abs_max": lambda v, **kw: jnp.max(jnp.abs(v), **kw),
            }[kind](x, axis=axes, keepdims=keep),
        )
        for kind in ("sum", "mean", "max", "abs_max")
        for axes, keep in (((1,), False), ((0, 2), True), ((0, 1, 2), False))
    ),
    Case(
        "reduce max ties",  # JAX splits the cotangent evenly between tied maxima
        (_f(3, 4, 5, domain=TIES),),
        lambda x: tf.reduce(x, axes=(1,), keepdim=False, kind="max"),
        lambda jnp, x: jnp.max(x, axis=1),
        tags=frozenset({"no finite differences"}),
    ),
    # ---- shape and structure ----------------------------------------------------------------
    Case(
        "reshape", (_f(4, 6),), lambda x: tf.reshape(x, (2, 3, 4)), lambda j, x: x.reshape(2, 3, 4)
    ),
    Case(
        "transpose",
        (_f(2, 3, 4),),
        lambda x: tf.transpose(x, (2, 0, 1)),
        lambda jnp, x: jnp.transpose(x, (2, 0, 1)),
    ),
    Case(
        "broadcast_to",
        (_f(4, 1),),
        lambda x: tf.broadcast_to(x, (3, 4, 5)),
        lambda jnp, x: jnp.broadcast_to(x, (3, 4, 5)),
    ),
    Case(
        "cast f32 to f16",
        (_f(4, 8, dtype="f32"),),
        lambda x: tf.cast(x, "f16"),
        lambda jnp, x: x.astype(jnp.float16),
        tolerance=1e-3,
        tags=frozenset({"no finite differences"}),  # the rounding of f16 is the derivative's noise
    ),
    Case(
        "slice",
        (_f(6, 8),),
        lambda x: tf.slice(x, (1, 2), (5, 7)),
        lambda jnp, x: x[1:5, 2:7],
    ),
    Case(
        "slice integer index",
        (_f(6, 8),),
        lambda x: tf.slice(x, (2, None), (3, None), squeeze_axes=(0,)),
        lambda jnp, x: x[2],
    ),
    Case(
        "slice strided",
        (_f(7, 8),),
        lambda x: tf.slice(x, (1, 0), (6, 8), strides=(2, 3)),
        lambda jnp, x: x[1:6:2, 0:8:3],
    ),
    Case(
        "reverse",
        (_f(4, 3, 2),),
        lambda x: tf.reverse(x, axes=(0, 2)),
        lambda jnp, x: jnp.flip(x, (0, 2)),
    ),
    Case(
        "gather rows, a row twice",
        (_f(6, 3), Input((4,), "i32", value=ROWS)),
        lambda x, i: tf.gather(x, i, axis=0),
        lambda jnp, x, i: jnp.take(x, i, axis=0),
    ),
    Case(
        "gather batched",
        (_f(2, 5, 3), Input((2, 4), "i32", value=BATCHED_ROWS)),
        lambda x, i: tf.gather(x, i, axis=1, batch_dims=1),
        lambda jnp, x, i: jnp.stack([jnp.take(x[b], i[b], axis=0) for b in range(2)]),
    ),
    Case(
        "scatter_add, a row twice",
        (_f(6, 3), Input((4,), "i32", value=ROWS), _f(4, 3)),
        lambda x, i, u: tf.scatter_add(x, i, u, axis=0),
        lambda jnp, x, i, u: x.at[i].add(u),
    ),
    Case(
        "concat",
        (_f(2, 3), _f(4, 3)),
        lambda a, b: tf.concat((a, b), axis=0),
        lambda jnp, a, b: jnp.concatenate([a, b], axis=0),
    ),
    Case(
        "concat an operand twice",
        (_f(2, 3), _f(2, 2)),
        lambda a, b: tf.concat((a, b, a), axis=1),
        lambda jnp, a, b: jnp.concatenate([a, b, a], axis=1),
    ),
    Case(
        "stack",
        (_f(2, 3), _f(2, 3)),
        lambda a, b: tf.stack((a, b), axis=1),
        lambda jnp, a, b: jnp.stack([a, b], axis=1),
    ),
    Case(
        "optimization_barrier",
        (_f(2, 3), _f(2, 3)),
        lambda a, b: _product_of_fields(tf.optimization_barrier((a, b))),
        lambda jnp, a, b: a * b,
    ),
    Case(
        "optimization_barrier, one field read",
        (_f(2, 3), _f(3)),
        lambda a, b: tf.tuple_get_item(tf.optimization_barrier((a, b)), index=0),
        lambda jnp, a, b: a,
    ),
    Case(
        "where",
        (Input((4, 4), "bool", value=MASK[:4]), _f(4, 4), _f(4)),
        tf.where,
        lambda jnp, c, x, y: jnp.where(c, x, y),
    ),
    Case(
        "dynamic_slice",
        (_f(8, 3), Input((), "i32", value=START)),
        lambda x, s: tf.dynamic_slice(x, s, axis=0, size=3, scale=2, offset=1),
        lambda jnp, x, s: x[2 * 2 + 1 : 2 * 2 + 4],
    ),
    Case(
        "dynamic_update_slice",
        (_f(8, 3), _f(2, 3), Input((), "i32", value=START)),
        lambda x, u, s: tf.dynamic_update_slice(x, u, s, axis=0),
        lambda jnp, x, u, s: x.at[2:4].set(u),
    ),
    Case(
        "blocked_dynamic_slice (a row of each block)",
        (_f(8, 3), Input((), "i32", value=START)),
        lambda x, s: tf.blocked_dynamic_slice(x, s, axis=0, blocks=4, size=1, offset=-1),
        lambda jnp, x, s: x.reshape(4, 2, 3)[:, 1],
    ),
    Case(
        "blocked_dynamic_update_slice",
        (_f(8, 3), _f(4, 3), Input((), "i32", value=START)),
        lambda x, u, s: tf.blocked_dynamic_update_slice(x, u, s, axis=0, blocks=4, offset=-1),
        lambda jnp, x, u, s: x.reshape(4, 2, 3).at[:, 1].set(u).reshape(8, 3),
    ),
    # ---- nn ---------------------------------------------------------------------------------
    Case(
        "softmax last",
        (_f(3, 5),),
        lambda x: tf.softmax(x, axis=-1),
        lambda jnp, x: _softmax(jnp, x, -1),
    ),
    Case(
        "softmax first",
        (_f(3, 5),),
        lambda x: tf.softmax(x, axis=0),
        lambda jnp, x: _softmax(jnp, x, 0),
    ),
    Case("rms_norm", (_f(3, 8), _f(8)), tf.rms_norm, lambda jnp, x, w: _rms_norm(jnp, x, w)),
    Case(
        "rms_norm eps",
        (_f(2, 3, 8), _f(8)),
        lambda x, w: tf.rms_norm(x, w, eps=0.5),
        lambda jnp, x, w: _rms_norm(jnp, x, w, 0.5),
    ),
    Case(
        "layer_norm",
        (_f(3, 8), _f(8), _f(8)),
        tf.layer_norm,
        lambda jnp, x, w, b: _layer_norm(jnp, x, w, b),
    ),
    Case("relu", (_f(4, 8, domain=AWAY_FROM_ZERO),), tf.relu, lambda j, x: j.maximum(x, 0.0)),
    Case("sigmoid", (_f(4, 8),), tf.sigmoid, _sigmoid),
    Case("tanh", (_f(4, 8),), tf.tanh, lambda jnp, x: jnp.tanh(x)),
    Case("gelu", (_f(4, 8),), tf.gelu, _gelu),
    Case("silu", (_f(4, 8),), tf.silu, lambda jnp, x: x * _sigmoid(jnp, x)),
    Case(
        "rope",
        (_f(2, 4, 8), _f(3, 4, 8), _f(6, 8), _f(6, 8), Input((4,), "i32", value=POSITIONS)),
        lambda q, k, cos, sin, pos: tf.rope(q, k, cos, sin, pos),
        lambda jnp, q, k, cos, sin, pos: (
            _rope(jnp, q, cos, sin, pos),
            _rope(jnp, k, cos, sin, pos),
        ),
    ),
    Case(
        "rope one branch",
        (_f(2, 4, 8), _f(3, 4, 8), _f(6, 8), _f(6, 8), Input((4,), "i32", value=POSITIONS)),
        lambda q, k, cos, sin, pos: tf.tuple_get_item(tf.rope(q, k, cos, sin, pos), index=1),
        lambda jnp, q, k, cos, sin, pos: _rope(jnp, k, cos, sin, pos),
    ),
    # ---- the ops whose rules landed with the VJP validator (issue 25 items 1 and 5) -------
    Case("clamp", (_f(4, 8), _f(4, 8), _f(4, 8)), tf.clamp, lambda j, x, lo, hi: j.clip(x, lo, hi)),
    Case(
        "clamp broadcast bounds",
        (_f(4, 8), _f(8), _f(1, 8)),
        tf.clamp,
        lambda jnp, x, lo, hi: jnp.clip(x, lo, hi),
    ),
    Case(
        "clamp literal bounds",
        (_f(4, 8),),
        lambda x: tf.clamp(x, -0.5, 0.5),
        lambda jnp, x: jnp.clip(x, -0.5, 0.5),
    ),
    Case(
        "clamp ties",  # jnp.clip splits a tie evenly, as maximum and minimum do
        (_f(4, 8, domain=TIES), _f(4, 8, domain=TIES), _f(4, 8, domain=TIES)),
        tf.clamp,
        lambda jnp, x, lo, hi: jnp.clip(x, lo, hi),
        tags=frozenset({"no finite differences"}),
    ),
    Case(
        "cumsum",
        (_f(3, 5),),
        lambda x: tf.cumsum(x, axis=1),
        lambda jnp, x: _lax("cumsum")(x, axis=1),
    ),
    Case(
        "cumsum reverse",
        (_f(4, 3),),
        lambda x: tf.cumsum(x, axis=0, reverse=True),
        lambda jnp, x: _lax("cumsum")(x, axis=0, reverse=True),
    ),
    Case(
        "cumprod",
        (_f(2, 5, 3),),
        lambda x: tf.cumprod(x, axis=1),
        lambda jnp, x: _lax("cumprod")(x, axis=1),
    ),
    Case(
        "cumprod through zeros",  # rounded draws: zero factors, where a division would fail
        (_f(3, 6, domain=TIES),),
        lambda x: tf.cumprod(x, axis=-1, reverse=True),
        lambda jnp, x: _lax("cumprod")(x, axis=1, reverse=True),
    ),
    Case(
        "cummax",
        (_f(3, 6),),
        lambda x: tf.cummax(x, axis=1),
        lambda jnp, x: _lax("cummax")(x, axis=1),
    ),
    Case(
        "cummin reverse",
        (_f(5, 2),),
        lambda x: tf.cummin(x, axis=0, reverse=True),
        lambda jnp, x: _lax("cummin")(x, axis=0, reverse=True),
    ),
    Case(
        "pad edges",
        (_f(4, 5),),
        lambda x: tf.pad(x, low=(1, 0), high=(2, 1), value=1.5),
        lambda jnp, x: _lax("pad")(x, 1.5, [(1, 2, 0), (0, 1, 0)]),
    ),
    Case(
        "pad interior, negative edges",
        (_f(4, 5),),
        lambda x: tf.pad(x, low=(-1, 2), high=(1, -2), interior=(1, 2)),
        lambda jnp, x: _lax("pad")(x, 0.0, [(-1, 1, 1), (2, -2, 2)]),
    ),
    Case(
        "topk",
        (_f(3, 6),),
        lambda x: tf.tuple_get_item(tf.topk(x, 2), index=0),
        lambda jnp, x: _topk(jnp, x, 2, -1, True),
    ),
    Case(
        "topk smallest along axis 0",
        (_f(5, 2, 3),),
        lambda x: tf.tuple_get_item(tf.topk(x, 3, axis=0, largest=False), index=0),
        lambda jnp, x: _topk(jnp, x, 3, 0, False),
    ),
    Case(
        "conv2d 3x3 pad 1",
        (_f(2, 3, 6, 6), _f(4, 3, 3, 3), _f(4)),
        lambda x, w, b: tf.conv2d(x, w, b, padding=(1, 1)),
        lambda jnp, x, w, b: _conv2d(jnp, x, w, b, padding=(1, 1)),
    ),
    Case(
        "conv2d strided, dilated, uneven",  # windows that leave input positions unread
        (_f(2, 2, 9, 8), _f(3, 2, 2, 3), _f(3)),
        lambda x, w, b: tf.conv2d(x, w, b, stride=(2, 3), padding=(1, 2), dilation=(2, 1)),
        lambda jnp, x, w, b: _conv2d(jnp, x, w, b, (2, 3), (1, 2), (2, 1)),
    ),
    Case(
        "conv2d groups 2",
        (_f(1, 4, 5, 5), _f(6, 2, 3, 3), _f(6)),
        lambda x, w, b: tf.conv2d(x, w, b, stride=(2, 2), groups=2),
        lambda jnp, x, w, b: _conv2d(jnp, x, w, b, stride=(2, 2), groups=2),
    ),
    Case(
        "insert_slice",
        (_f(6, 5), _f(2, 3), Input((), "i32", value=np.int32(3)), Input((), "i32", value=START)),
        lambda d, u, a, b: tf.insert_slice(d, u, (a, b)),
        lambda jnp, d, u, a, b: d.at[3:5, 2:5].set(u),
    ),
    Case(
        "cache_update",
        (
            _f(2, 6, 2, 4),
            Input((), "i32", value=START),
            Input((), "i32", value=START),
            _f(2, 3, 2, 4),
        ),
        tf.cache_update,
        lambda jnp, cache, p, s, new: cache.at[:, 2:4].set(new[:, :2]),
    ),
)
