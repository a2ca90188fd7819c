"""Iota: `start + step * i` along one axis of a new tensor (StableHLO `iota`, numpy `arange`).

`tf.iota(shape, dtype, axis=0)` is StableHLO's broadcasted iota (jax `lax.broadcasted_iota`);
`tf.arange([start,] stop[, step], dtype=None)` is numpy's `arange`, a rank-1 Iota of
`ceil((stop - start) / step)` elements whose dtype, when not given, is i64 for integer arguments
(the DSL's Python int) and f32 otherwise (its Python float).

Integer dtypes compute in the dtype (wrapping, as numpy and XLA do); float dtypes compute
`start + step * i` in f64 and round once, as numpy's `arange` does, so `tf.arange(0.0, 1.0, 0.1)`
holds numpy's values. Like Zeros it has no operand: the result is plain (a Reshard splits it
locally), and its relation is a lone identity output boundary.
"""

from __future__ import annotations

import math

import numpy as np

from tilefoundry.analysis.access_relation import (
    AccessRelations,
    BoundaryRelation,
    identity_access,
)
from tilefoundry.errors import EvalError, VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.op_support import (
    as_dtype,
    normalize_axis,
    number_attribute,
    numpy_dtype,
    shape_attribute,
)
from tilefoundry.ir.lowering.values import Value, iota
from tilefoundry.ir.types import DType, StorageKind, TensorType, f8e8m0, f32, f64, format_dim, i64
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_not_sampled,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_zero_cotangent,
)


class Iota(Op):
    """A tensor of `shape` holding `start + step * i` at index i of `axis`."""

    shape = ParamDef("attribute", tuple, validate=shape_attribute)
    dtype = ParamDef("attribute", DType, validate=as_dtype)
    axis = ParamDef("attribute", int, default=0)
    start = ParamDef("attribute", validate=number_attribute, default=0)
    step = ParamDef("attribute", validate=number_attribute, default=1)


def _checked(op: Iota) -> int:
    """The normalised axis, after the dtype rules."""
    if not op.shape:
        raise VerifyError("Iota: a rank-0 shape has no axis to count along; give shape (n,)")
    dtype = op.dtype
    if dtype.is_bool or dtype == f8e8m0:
        raise VerifyError(f"Iota: {dtype} cannot hold a count; make an integer or float iota")
    if dtype.is_int:
        for name in ("start", "step"):
            value = getattr(op, name)
            if isinstance(value, float) and not value.is_integer():
                raise VerifyError(f"Iota: {name} {value!r} is not an integer, but dtype is {dtype}")
    return normalize_axis(op, op.axis, len(op.shape))


@register_typeinfer(Iota)
def _typeinfer(op: Iota, arg_types, ctx) -> TensorType:
    _checked(op)
    return TensorType(op.shape, op.dtype, None, StorageKind.GMEM)


@register_access_relation(Iota)
def _relation(op: Iota, arg_types) -> AccessRelations:
    return AccessRelations((), (BoundaryRelation(identity_access(len(op.shape))),))


@register_eval(Iota)
def _eval(op: Iota, args, out_type: TensorType) -> np.ndarray:
    shape = out_type.shape
    if not all(isinstance(d, int) for d in shape):
        dims = ", ".join(format_dim(d) for d in shape)
        raise EvalError(f"Iota: shape [{dims}] is symbolic at evaluation; bind its DimVars first")
    axis = _checked(op)
    target = numpy_dtype(out_type.dtype)
    if out_type.dtype.is_int:
        count = np.arange(shape[axis], dtype=target)
        with np.errstate(over="ignore"):
            values = count * target.type(int(op.step)) + target.type(int(op.start))
    else:
        values = (np.float64(op.start) + np.float64(op.step) * np.arange(shape[axis])).astype(
            target
        )
    lined_up = values.reshape([-1 if a == axis else 1 for a in range(len(shape))])
    return np.broadcast_to(lined_up, shape).copy()


def arange(start, stop=None, step=1, dtype=None) -> tuple[tuple, dict]:
    """numpy's `arange` spelling of an Iota (`tf.arange`): compile-time numbers only."""
    if stop is None:
        start, stop = 0, start
    for name, value in (("start", start), ("stop", stop), ("step", step)):
        _number_argument(name, value)
    if step == 0:
        raise VerifyError("step must not be zero")
    count = max(0, math.ceil((stop - start) / step))
    integral = all(isinstance(v, int | np.integer) for v in (start, stop, step))
    chosen = as_dtype(dtype) if dtype is not None else i64 if integral else f32
    return (), {"shape": (count,), "dtype": chosen, "start": start, "step": step}


def _number_argument(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise VerifyError(
            f"{name} must be a compile-time number (the result's extent is static), got "
            f"{value!r}; for a runtime range, compare a tf.iota against it"
        )


register_surface("iota", Iota)
register_surface("arange", Iota, rewrite=arange)
register_fusion_kind(Iota, FusionKind.BARRIER)
register_zero_cotangent(Iota, "iota has no inputs")
register_not_sampled(Iota, "it has no operand, so there is no input state to vary")


@register_stablehlo(Iota)
def _stablehlo(op: Iota, operands, arg_types, out_type, lw):
    """`stablehlo.iota` in the dtype (integers) or in f64 (floats), scaled, shifted and rounded
    once, the kernel's order of operations. (A Pallas kernel has no f64: it counts in f32.)"""
    axis = _checked(op)
    shape = lw.shape(out_type)
    dtype = out_type.dtype
    number = int if dtype.is_int else float
    count: Value = iota(lw, shape, axis, dtype if dtype.is_int else f64)
    if op.step != 1:
        count = count * number(op.step)
    if op.start != 0:
        count = count + number(op.start)
    return count.convert(dtype).name


@register_pallas(Iota)
def _pallas(op: Iota, args, arg_types, out_type, kx):
    axis = _checked(op)
    wide = kx.dtype(out_type.dtype) if out_type.dtype.is_int else kx.jnp.float32
    count = kx.lax.broadcasted_iota(wide, out_type.shape, axis)
    return (count * op.step + op.start).astype(kx.dtype(out_type.dtype))
