"""Random sharded programs for the soundness property test (issue 28), each paired with an
independent numpy mirror of its global meaning.

A program is built from a seed alone (`valid(seed)`, `wrong(seed)`), so the 8-device worker
rebuilds the same Function from the seed and only integers and arrays cross the process boundary.
Values live on one device mesh (x=2, y=4, 8 devices); parameters take a random state per mesh
axis (Broadcast, Split of a logical axis, Partial(sum) or Partial(max)), and each step applies a
random op (elementwise, matmul, reduce, reshape, transpose, reshard to a random state) to values
already built. A step whose op typeinfer refuses is dropped (the generator asks for well-typed
programs); the accepted ones are recorded with their numpy meaning on global values, which is
what `evaluate`, `run_xla` and the SPMD exit must compute (DESIGN §4.12).

`wrong(seed)` builds a valid prefix and then one op that the seeds say must be refused: a Reshard
to another logical shape of the same size (shard §7.4), a storage change without `layout=` (hir
Reshard), a shape mismatch, a non-linear op of a pending sum, a Partial created by a Reshard, or
pending sums on two mesh axes added.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Call, Expr, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.hir.sharding.reshard import Reshard
from tilefoundry.ir.hir.tensor import Reduce, ReduceKind, Reshape, Transpose
from tilefoundry.ir.types import TensorType, f32, make_shard_tensor_type
from tilefoundry.ir.types.shard import B, Layout, P, S, ShardLayout, make_mesh

MESH = make_mesh((2, 4), ("x", "y"))
DEVICES = 8
SHAPES = ((8, 16), (16, 8), (8, 8), (16,))

Mirror = Callable[..., np.ndarray]


def _erf(a: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(a)


UNARY: dict[UnaryKind, Mirror] = {
    UnaryKind.NEG: np.negative,
    UnaryKind.ABS: np.abs,
    UnaryKind.RELU: lambda a: np.maximum(a, 0.0),
    UnaryKind.ERF: _erf,
}
BINARY: dict[BinaryKind, Mirror] = {
    BinaryKind.ADD: np.add,
    BinaryKind.SUB: np.subtract,
    BinaryKind.MUL: np.multiply,
    BinaryKind.MAX: np.maximum,
}


@dataclass
class Program:
    fn: Function
    mirror: Callable[[list[np.ndarray]], np.ndarray]
    arguments: list[np.ndarray]


@dataclass
class Value:
    expr: Expr
    meaning: Callable[[list[np.ndarray]], np.ndarray]

    @property
    def type(self) -> TensorType:
        return self.expr.type


def _state(rng: random.Random, shape: tuple, mesh_axis: int, taken: set[int]) -> object:
    """A random attr for one mesh axis: Broadcast, a Split of a logical axis it divides (one
    mesh axis per logical axis here), or a pending reduction."""
    size = MESH.shape[mesh_axis]
    splits = [S(k) for k, extent in enumerate(shape) if extent % size == 0 and k not in taken]
    choice = rng.choice([B, B, *splits, P("sum"), P("max")])
    if isinstance(choice, S):
        taken.add(choice.axis)
    return choice


def _attrs(rng: random.Random, shape: tuple, *, pending: bool = True) -> tuple:
    taken: set[int] = set()
    attrs = []
    for mesh_axis in range(MESH.rank):
        attr = _state(rng, shape, mesh_axis, taken)
        if not pending and isinstance(attr, P):
            attr = B
        attrs.append(attr)
    return tuple(attrs)


def _type(shape: tuple, attrs: tuple) -> TensorType:
    return make_shard_tensor_type(shape, f32, mesh=MESH, attrs=attrs)


def _typed(op: object, *args: Value) -> Expr:
    """The call, typed; a VerifyError is typeinfer refusing it."""
    call = Call(op, tuple(a.expr for a in args))
    TypeInferContext().infer(call)
    return call


def _target(rng: random.Random, shape: tuple) -> ShardLayout:
    """A canonical complete layout of `shape` (a Reshard cannot create a pending reduction)."""
    canonical = _type(shape, _attrs(rng, shape, pending=False)).layout
    return ShardLayout(Layout(canonical.layout.shape), canonical.attrs, MESH)


def _step(rng: random.Random, pool: list[Value]) -> Value:
    a = rng.choice(pool)
    shape = tuple(a.type.shape)
    kind = rng.choice(("unary", "binary", "matmul", "reduce", "reshape", "transpose", "reshard"))
    if kind == "unary":
        op = rng.choice(list(UNARY))
        fn = UNARY[op]
        return Value(_typed(Unary(kind=op), a), lambda xs: fn(a.meaning(xs)))
    if kind == "binary":
        b = rng.choice([v for v in pool if tuple(v.type.shape) == shape])
        op = rng.choice(list(BINARY))
        fn = BINARY[op]
        return Value(_typed(Binary(kind=op), a, b), lambda xs: fn(a.meaning(xs), b.meaning(xs)))
    if kind == "matmul" and len(shape) == 2:
        b = rng.choice([v for v in pool if len(v.type.shape) == 2 and v.type.shape[0] == shape[1]])
        return Value(_typed(MatMul(), a, b), lambda xs: a.meaning(xs) @ b.meaning(xs))
    if kind == "reduce" and shape:
        axis = rng.randrange(len(shape))
        return Value(
            _typed(Reduce(axes=(axis,), keepdim=False, kind=ReduceKind.SUM), a),
            lambda xs: a.meaning(xs).sum(axis=axis),
        )
    if kind == "reshape" and shape:
        size = int(np.prod(shape))
        new = rng.choice(
            [
                s
                for s in ((size,), (8, size // 8), (size // 8, 8), (4, 4, size // 16))
                if s != shape and int(np.prod(s)) == size
            ]
        )
        return Value(_typed(Reshape(new_shape=new), a), lambda xs: a.meaning(xs).reshape(new))
    if kind == "transpose" and len(shape) == 2:
        return Value(_typed(Transpose(perm=(1, 0)), a), lambda xs: a.meaning(xs).T)
    return Value(_typed(Reshard(layout=_target(rng, shape)), a), a.meaning)


def _parameters(rng: random.Random) -> list[Value]:
    params = []
    for i, shape in enumerate(rng.sample(SHAPES, 3)):
        var = Var(f"p{i}", _type(shape, _attrs(rng, shape)))
        params.append(Value(var, lambda xs, i=i: xs[i].astype(np.float64)))
    return params


def _arguments(seed: int, params: list[Value]) -> list[np.ndarray]:
    data = np.random.default_rng(seed)
    return [data.uniform(-1.0, 1.0, tuple(p.type.shape)).astype(np.float32) for p in params]


def _grow(rng: random.Random, params: list[Value], steps: int) -> list[Value]:
    pool = list(params)
    for _ in range(steps):
        try:
            pool.append(_step(rng, pool))
        except (VerifyError, IndexError):  # typeinfer refused it, or nothing fits: another op
            continue
    return pool


def valid(seed: int) -> Program:
    """A well-typed sharded program of up to 14 ops (its last value returned)."""
    rng = random.Random(seed)
    params = _parameters(rng)
    pool = _grow(rng, params, 14)
    result = pool[-1]
    fn = Function(f"random_{seed}", tuple(p.expr for p in params), result.expr, result.type)
    return Program(fn, result.meaning, _arguments(seed, params))


def _wrong_op(rng: random.Random, pool: list[Value]) -> tuple[str, Callable[[], Expr]]:
    """One op the seeds refuse, and what makes it wrong."""
    a = rng.choice(pool)
    shape = tuple(a.type.shape)
    cases: list[tuple[str, Callable[[], Expr]]] = [
        (
            "hir Reshard: a storage change without layout=",
            lambda: _typed(Reshard(storage="rmem"), a),
        ),
    ]
    if shape:  # a scalar broadcasts with every shape
        cases.append(
            (
                "hir Binary: shapes that do not broadcast",
                lambda: _typed(Binary(kind=BinaryKind.ADD), a, _mismatched(pool, shape)),
            )
        )
    if len(shape) == 2:  # a 1-D shape is factored by every layout of its size
        rows, cols = shape
        other = (cols, rows) if rows != cols else (rows // 2, cols * 2)
        cases.append(
            (
                f"shard §7.4: Reshard of {shape} to a layout of shape {other}",
                lambda: _typed(Reshard(layout=_target(rng, other)), a),
            )
        )
    if not isinstance((*_value_attrs(a), B)[0], P):
        cases.append(
            (
                "hir Reshard: a Reshard cannot create a pending reduction",
                lambda: _typed(Reshard(layout=_partial_target(shape)), a),
            )
        )
    pending = [v for v in pool if any(isinstance(attr, P) for attr in _value_attrs(v))]
    sums = [v for v in pending if any(attr == P("sum") for attr in _value_attrs(v))]
    if sums:
        p = rng.choice(sums)
        cases.append(
            ("hir Unary: exp of a pending sum", lambda: _typed(Unary(kind=UnaryKind.EXP), p))
        )
    return rng.choice(cases)


def _value_attrs(v: Value) -> tuple:
    layout = v.type.layout
    return layout.attrs if isinstance(layout, ShardLayout) else ()


def _partial_target(shape: tuple) -> ShardLayout:
    canonical = _type(shape, (P("sum"), B)).layout
    return ShardLayout(Layout(canonical.layout.shape), canonical.attrs, MESH)


def _mismatched(pool: list[Value], shape: tuple) -> Value:
    """An operand whose shape does not broadcast with `shape` (from right to left)."""
    for v in pool:
        other = tuple(v.type.shape)
        pairs = zip(reversed(shape), reversed(other), strict=False)
        if any(x != y and 1 not in (x, y) for x, y in pairs):
            return v
    wrong = (shape[-1] + 1,)
    return Value(Var("q", TensorType(wrong, f32)), lambda xs: None)


def wrong(seed: int) -> tuple[str, Callable[[], Expr]]:
    """A valid prefix and one op the seeds refuse (call the second element to build it)."""
    rng = random.Random(10_000 + seed)
    pool = _grow(rng, _parameters(rng), 4)
    return _wrong_op(rng, pool)
