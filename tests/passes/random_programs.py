"""Random well-typed HIR DAGs for the pass property tests.

A program starts from a few parameters (f32, i32 and bool, full and lower rank) and applies random
elementwise, comparison, select, reduce, matmul, transpose, reshape, broadcast, literal and loop
ops, and root-with-epilogue patterns (issue 19), to values already built, so operands are shared
and implicit broadcasts and scalar literals appear as the DSL would leave them. `pick(options)` is
the only source of choice, so the same generator runs under hypothesis (`data.draw`) and under a
seeded `random.Random` (the subprocess determinism test).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.ir.core import Call, Constant, Expr, Tuple, Var
from tilefoundry.ir.hir import Function
from tilefoundry.ir.hir.grid_region import make_grid_region
from tilefoundry.ir.hir.math import Binary, BinaryKind, Unary, UnaryKind
from tilefoundry.ir.hir.nn import MatMul
from tilefoundry.ir.hir.tensor import BroadcastTo, Reduce, ReduceKind, Reshape, Transpose, Where
from tilefoundry.ir.types import TensorType, bool_, f32, i32

Pick = Callable[[Sequence[Any]], Any]

PARAMS = (
    ("x", (4, 6), f32),
    ("y", (6,), f32),
    ("n", (4, 6), i32),
    ("m", (6,), i32),
    ("p", (4, 6), bool_),
    # size-1 axes of the same rank: broadcasts that legalize must make explicit (issue 20: a
    # same-rank broadcast, f32[4,6] + f32[1,6], went unnoticed when every broadcast added axes)
    ("r", (1, 6), f32),
    ("c", (4, 1), f32),
)
ARITH = (BinaryKind.ADD, BinaryKind.SUB, BinaryKind.MUL, BinaryKind.MAX, BinaryKind.MIN)
COMPARE = (BinaryKind.LT, BinaryKind.EQ, BinaryKind.GE)


def _typed(call: Expr) -> Expr:
    TypeInferContext().infer(call)
    return call


def _call(op: Any, *args: Expr) -> Expr:
    return _typed(Call(op, args))


def _suffix_compatible(a: TensorType, b: TensorType) -> bool:
    """Torch broadcasting (hir Binary): aligned from the right, each pair equal or one is 1."""
    pairs = zip(reversed(a.shape), reversed(b.shape), strict=False)  # the shorter one's axes
    return all(x == y or 1 in (x, y) for x, y in pairs)


def _step(pool: list[Expr], pick: Pick) -> Expr | None:
    """One random op over `pool`, or None when the chosen op has no operands that fit."""
    a = pick(pool)
    t = a.type
    numeric = not t.dtype.is_bool
    kind = pick(
        (
            "unary",
            "binary",
            "compare",
            "where",
            "reduce",
            "matmul",
            "view",
            "literal",
            "loop",
            "epilogue",
        )
    )
    if kind == "unary":
        if not numeric:
            return _call(Unary(kind=UnaryKind.NOT), a)
        ops = (UnaryKind.NEG, UnaryKind.ABS) + ((UnaryKind.EXP,) if t.dtype.is_float else ())
        return _call(Unary(kind=pick(ops)), a)
    if kind in ("binary", "compare"):
        partners = [b for b in pool if b.type.dtype == t.dtype and _suffix_compatible(t, b.type)]
        b = pick(partners)
        if not numeric:
            return _call(Binary(kind=pick((BinaryKind.AND, BinaryKind.OR))), a, b)
        return _call(Binary(kind=pick(ARITH if kind == "binary" else COMPARE)), a, b)
    if kind == "where":
        conds = [c for c in pool if c.type.dtype.is_bool and _suffix_compatible(c.type, t)]
        others = [b for b in pool if b.type.dtype == t.dtype and b.type.shape == t.shape]
        if not conds:
            return None
        return _call(Where(), pick(conds), a, pick(others))
    if kind == "reduce" and numeric and t.rank >= 1:
        axes = pick((*((i,) for i in range(t.rank)), tuple(range(t.rank))))
        reduce_kind = pick((ReduceKind.SUM, ReduceKind.MAX))
        return _call(Reduce(axes=axes, keepdim=pick((True, False)), kind=reduce_kind), a)
    if kind == "matmul" and numeric and t.rank == 2:
        rhs = [b for b in pool if b.type.dtype == t.dtype and b.type.rank == 2]
        rhs = [b for b in rhs if b.type.shape[0] == t.shape[1]]
        rhs += [_call(Transpose(perm=(1, 0)), b) for b in pool if b.type == t]
        return _call(MatMul(), a, pick(rhs))
    if kind == "view" and t.rank >= 1:
        view = pick(("transpose", "reshape", "broadcast"))
        if view == "transpose" and t.rank == 2:
            return _call(Transpose(perm=(1, 0)), a)
        if view == "reshape":
            size = int(np.prod(t.shape))
            halves = ((2, size // 2), (size // 2, 2)) if size % 2 == 0 else ()
            shapes = [s for s in ((size,), *halves) if s != t.shape]
            return _call(Reshape(new_shape=pick(shapes)), a) if shapes else None
        return _call(BroadcastTo(shape=(3, *t.shape)), a)
    if kind == "literal" and numeric:
        value = 1.5 if t.dtype.is_float else np.int32(2)
        return _call(Binary(kind=pick((BinaryKind.ADD, BinaryKind.MUL))), a, Constant(value))
    if kind == "loop" and numeric:
        return _loop(pool, a, pick)
    if kind == "epilogue" and numeric and t.rank == 2:
        return _epilogue(pool, a, pick)
    return None


def _epilogue(pool: list[Expr], a: Expr, pick: Pick) -> Expr:
    """A root whose result an elementwise op reads (issue 19: the epilogue joins the root's
    region): softmax's normalisation `a / sum(a)` (or `a - max(a)`) over a row, or a matmul with a
    transposed operand (its prologue) and a residual add."""
    t = a.type
    if pick(("reduce", "matmul")) == "reduce":
        axis = pick((0, 1))
        reduce_kind = pick((ReduceKind.SUM, ReduceKind.MAX))
        total = _call(Reduce(axes=(axis,), keepdim=True, kind=reduce_kind), a)
        total = _call(BroadcastTo(shape=t.shape), total)
        return _call(Binary(kind=pick((BinaryKind.SUB, BinaryKind.MUL))), a, total)
    same = [b for b in pool if b.type == t]
    product = _call(MatMul(), a, _call(Transpose(perm=(1, 0)), pick(same)))
    residual = [b for b in pool if b.type == product.type]
    if not residual:
        return _call(Unary(kind=UnaryKind.NEG), product)
    return _call(Binary(kind=pick(ARITH)), pick(residual), product)


def _loop(pool: list[Expr], init: Expr, pick: Pick) -> Expr:
    """A 3-trip loop carrying `init`: `carry = carry <op> u(carry <op> b)` with `b` from the
    pool, sometimes through a loop-invariant unary (DESIGN §6: the body fuses as a block of its
    own; the invariant part belongs to the enclosing block)."""
    t = init.type
    partners = [b for b in pool if b.type.dtype == t.dtype and _suffix_compatible(t, b.type)]
    partner = pick(partners)
    if pick((True, False)):
        partner = _call(Unary(kind=UnaryKind.ABS), partner)
    unary = (UnaryKind.NEG, UnaryKind.ABS)
    outer, inner, kind = pick(ARITH), pick(ARITH), pick(unary)

    def build(_index, phis):
        (carry,) = phis
        step = _call(Unary(kind=kind), _call(Binary(kind=inner), carry, partner))
        if step.type != carry.type:  # the partner broadcast the carry: reduce it back
            step = _call(Binary(kind=inner), carry, carry)
        value = _call(Binary(kind=outer), carry, step)
        return value, (value,)

    return make_grid_region((init,), 3, build)


def random_function(pick: Pick, name: str = "random") -> Function:
    """A random program of 3-10 ops returning one or two of its last values."""
    params = tuple(Var(n, TensorType(shape, dtype)) for n, shape, dtype in PARAMS)
    pool: list[Expr] = list(params)
    built: list[Expr] = []
    for _ in range(pick(range(3, 11))):
        new = _step(pool, pick)
        if new is not None:
            pool.append(new)
            built.append(new)
    if not built:
        built.append(_call(Unary(kind=UnaryKind.NEG), params[0]))
    if len(built) > 1 and pick((True, False)):
        body = _typed(Tuple((built[-1], built[len(built) // 2])))
    else:
        body = built[-1]
    return Function(name, params, body, body.type)


def random_arguments(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _, shape, dtype in PARAMS:
        if dtype.is_bool:
            out.append(rng.random(shape) < 0.5)
        elif dtype.is_int:
            out.append(rng.integers(-5, 6, shape).astype(np.int32))
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out
