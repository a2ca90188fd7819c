"""`grad`, `value_and_grad` and `vjp`: Function -> Function (DESIGN §3, §4.18).

Each returns an ordinary typed HIR Function over the differentiated function's own parameters,
so `check`, `show`, `compile`, the evaluator and every exit take it unchanged, and inside a DSL
body it is called like any @func (`loss, (g1, g2) = value_and_grad(f, argnums=(1, 2))(x, a, b)`).
Its body is the forward program (calls of other @func inlined per call site) followed by the
backward program the VJP rules build. The shapes follow JAX:

- `grad(fn, argnums=0)`: fn returns a rank-0 float; the result returns the gradient of each
  parameter `argnums` names (one value for an int, a tuple for a tuple of ints);
- `value_and_grad(fn, argnums=0)`: returns `(value, gradients)`;
- `vjp(fn, argnums=None)`: takes `(*fn's parameters, *output cotangents)`, one cotangent per
  float output (in output order; integer and bool outputs carry none), and returns
  `(outputs, (cotangent of each parameter argnums names,))`; `argnums=None` names every float
  parameter. An output cotangent has its output's type, a pending sum replaced by Broadcast.

`argnums` naming an integer or bool parameter is refused (as in JAX): such an input has no
cotangent. By default a returned gradient has exactly its parameter's type (the transform inserts
the Reshard, which is the gradient collective); `reduce_gradients=False` leaves every pending sum
pending instead (a data-parallel weight's gradient is `Partial(sum)` over the batch axis, with no
collective), for a caller that accumulates micro-batches and reduces once, or reduce-scatters
straight into a Split (ZeRO).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.autodiff.backward import Backward
from tilefoundry.autodiff.builder import Builder, is_float_tensor
from tilefoundry.autodiff.calls import inline_differentiated_calls
from tilefoundry.autodiff.reshard_policy import cotangent_layout, parameter_gradient
from tilefoundry.errors import VerifyError
from tilefoundry.frontend.transforms import derived, function_transform
from tilefoundry.ir.core import Constant, Expr, Tuple, Var, source_span
from tilefoundry.ir.hir import Function, elaborate
from tilefoundry.ir.types import StorageKind, TensorType, TupleType
from tilefoundry.sharding.shard_reading import pending_partials


@function_transform
def grad(fn: Function, argnums: int | Sequence[int] = 0, *, reduce_gradients: bool = True):
    """The gradient of the rank-0 float `fn` with respect to the parameters `argnums` names."""
    result = _transform(fn, argnums, reduce_gradients, with_value=False)
    return _per_call_site(result, fn, grad, argnums, reduce_gradients)


@function_transform
def value_and_grad(
    fn: Function, argnums: int | Sequence[int] = 0, *, reduce_gradients: bool = True
):
    """`(fn(...), grad(fn, argnums)(...))` in one Function, sharing the forward program."""
    result = _transform(fn, argnums, reduce_gradients, with_value=True)
    return _per_call_site(result, fn, value_and_grad, argnums, reduce_gradients)


@function_transform
def vjp(fn: Function, argnums: int | Sequence[int] | None = None, *, reduce_gradients=True):
    """The vector-Jacobian product of `fn` (see the module doc for its signature)."""
    return _per_call_site(_vjp(fn, argnums, reduce_gradients), fn, vjp, argnums, reduce_gradients)


def _per_call_site(result: Function, fn: Function, transform, argnums, reduce_gradients):
    """`result`, derived again from `fn` elaborated for a call site's primal argument types
    (`frontend.transforms.at_call_site`): the gradient of the program that call runs."""
    count = len(fn.params)

    def rederive(arg_types: tuple) -> Function:
        source = elaborate(fn, arg_types[:count])
        return transform(source, argnums, reduce_gradients=reduce_gradients)

    return derived(result, rederive)


def _vjp(fn: Function, argnums: Any, reduce_gradients: bool) -> Function:
    _check_function("vjp", fn)
    chosen = _argnums("vjp", fn, argnums)
    outputs = _output_leaves(fn.return_type)
    cotangents = [
        Var(f"d_out{i}" if len(outputs) > 1 else "d_out", _cotangent_type("vjp", fn, type_))
        for i, type_ in enumerate(outputs)
        if is_float_tensor(type_)
    ]
    given = iter(cotangents)
    seed = _regroup(fn.return_type, lambda t: next(given) if is_float_tensor(t) else None)
    ctx = TypeInferContext()
    value, gradients = _differentiate(fn, chosen, seed, reduce_gradients, ctx)
    body = Tuple((value, Tuple(tuple(gradients))))
    return _function(f"vjp_{fn.name}", (*fn.params, *cotangents), body, fn, ctx)


def _transform(fn: Function, argnums: Any, reduce_gradients: bool, *, with_value: bool):
    what = "value_and_grad" if with_value else "grad"
    _check_function(what, fn)
    chosen = _argnums(what, fn, argnums)
    out = fn.return_type
    if not (isinstance(out, TensorType) and out.rank == 0 and out.dtype.is_float):
        raise VerifyError(
            f"{what}: Function {fn.name} returns {out}, but {what} differentiates a rank-0 float "
            "(a scalar loss); reduce the output first (e.g. tf.reduce(y, axes=..., "
            "keepdim=False, kind='mean')), or use vjp for other outputs",
            location=source_span(fn),
        )
    ctx = TypeInferContext()
    one = Constant(
        np.ones((), out.dtype.to_numpy()), TensorType((), out.dtype, None, StorageKind.UMAT)
    )
    value, gradients = _differentiate(fn, chosen, one, reduce_gradients, ctx)
    result = gradients[0] if isinstance(argnums, int) else Tuple(tuple(gradients))
    body = Tuple((value, result)) if with_value else result
    return _function(f"{what}_{fn.name}", fn.params, body, fn, ctx)


def _differentiate(
    fn: Function, chosen: Sequence[int], seed: Any, reduce_gradients: bool, ctx: TypeInferContext
) -> tuple[Expr, list[Expr]]:
    """(the forward value, the gradient of each chosen parameter, typed as documented)."""
    wrt = [fn.params[i] for i in chosen]
    forward = inline_differentiated_calls(fn.body, wrt)
    walk = Backward(ctx)
    totals = walk.region([forward], [seed], leaves=wrt, varied_leaves=wrt)
    ad = Builder(ctx, fn)
    gradients = []
    for param in wrt:
        total = totals[param]
        if total is None:
            total = ad.zeros_like(param)
        gradients.append(
            parameter_gradient(total, param.type, ad, reduce_gradients=reduce_gradients)
        )
    forward, *gradients = walk.finish([forward, *gradients])
    return forward, gradients


def _function(name: str, params: tuple[Var, ...], body: Expr, fn: Function, ctx) -> Function:
    ctx.infer(body)
    result = Function(name, params, body, body.type, metadata=fn.metadata)
    ctx.infer(result)
    return result


def _check_function(what: str, fn: Any) -> None:
    if not isinstance(fn, Function):
        raise VerifyError(f"{what}: differentiates a @func Function, got {fn!r}")
    if fn.body is None:
        raise VerifyError(
            f"{what}: Function {fn.name} is a dispatch prototype; differentiate one of its "
            "variants (reverse mode needs one body)",
            location=source_span(fn),
        )


def _argnums(what: str, fn: Function, argnums: Any) -> tuple[int, ...]:
    """The parameter indices to differentiate, each checked to name a float parameter."""
    if argnums is None:
        return tuple(i for i, p in enumerate(fn.params) if is_float_tensor(p.type))
    chosen = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    count = len(fn.params)
    for index in chosen:
        if isinstance(index, bool) or not isinstance(index, int) or not -count <= index < count:
            raise VerifyError(
                f"{what}: argnums {argnums!r} must name parameters of Function {fn.name} "
                f"(integers in [{-count}, {count})), got {index!r}",
                location=source_span(fn),
            )
    chosen = tuple(i % count for i in chosen)
    if len(set(chosen)) != len(chosen):
        raise VerifyError(
            f"{what}: argnums {argnums!r} names a parameter twice", location=source_span(fn)
        )
    for index in chosen:
        param = fn.params[index]
        if not is_float_tensor(param.type):
            raise VerifyError(
                f"{what}: parameter '{param.name}' of Function {fn.name} is {param.type}, which "
                "has no cotangent (only float tensors are differentiated, as in JAX); drop it "
                "from argnums",
                location=source_span(param) or source_span(fn),
            )
    return chosen


def _output_leaves(type_: Any) -> list[TensorType]:
    if isinstance(type_, TupleType):
        return [leaf for field in type_.fields for leaf in _output_leaves(field)]
    return [type_]


def _regroup(type_: Any, leaf: Any) -> Any:
    if isinstance(type_, TupleType):
        return tuple(_regroup(field, leaf) for field in type_.fields)
    return leaf(type_)


def _cotangent_type(what: str, fn: Function, out: TensorType) -> TensorType:
    """An output's cotangent type: its own, a pending sum replaced by Broadcast."""
    for axis, reduction in pending_partials(out).items():
        if reduction != "sum":
            raise VerifyError(
                f"{what}: Function {fn.name} returns a value pending Partial({reduction}) on "
                f"{out.layout.mesh.axes[axis].label}, which has no cotangent; complete it "
                "before returning (reshard to Broadcast)",
                location=source_span(fn),
            )
    storage = StorageKind.GMEM if out.storage == StorageKind.UMAT else out.storage
    return TensorType(out.shape, out.dtype, cotangent_layout(out), storage)
