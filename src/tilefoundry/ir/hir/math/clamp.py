"""Clamp: `min(max(x, lo), hi)` elementwise (StableHLO `clamp`, numpy `clip`, torch `clamp`).

Torch broadcasting over the three operands, like Where; one shared dtype, a Python float taking
the tensors' float dtype (`tf.clamp(x, 0.0, 6.0)`); bool has no order to clamp by. When lo > hi
the result is hi, as in StableHLO and numpy.

Clamp is non-decreasing in each operand, and a non-decreasing function of one pending value
commutes with max and min over devices (f(max_i a_i) == max_i f(a_i)). So on a mesh axis where
exactly one operand carries Partial(max) or Partial(min) and the others are replicated, it
carries; two operands pending one reduction carry only where the inner max or the outer min is
that reduction (`_JOINT`). A pending sum never commutes with clamping.
"""

from __future__ import annotations

import functools

import numpy as np

from tilefoundry.analysis.access_relation import elementwise_relations
from tilefoundry.errors import VerifyError
from tilefoundry.ir.core import Op, ParamDef
from tilefoundry.ir.hir.math.binary import BinaryKind
from tilefoundry.ir.hir.math.binary_kernels import maximum, minimum
from tilefoundry.ir.hir.math.derivatives import extremum_share
from tilefoundry.ir.hir.op_support import (
    broadcast_operand_shapes,
    completion_remedy,
    compute_in_f32,
    mesh_axis_label,
    propagate,
    refuse_partials,
    result_storage,
    same_dtype,
    tensor_operands,
)
from tilefoundry.ir.lowering.values import Value
from tilefoundry.ir.types import DType, StorageKind, TensorType, f32
from tilefoundry.rules import (
    FusionKind,
    register_access_relation,
    register_eval,
    register_fusion_kind,
    register_pallas,
    register_stablehlo,
    register_surface,
    register_typeinfer,
    register_validation_samples,
    register_vjp,
)
from tilefoundry.rules.validation_samples import Sample, operand
from tilefoundry.sharding.shard_reading import pending_partials


class Clamp(Op):
    """`x` clamped into `[lo, hi]`."""

    x = ParamDef("input")
    lo = ParamDef("input")
    hi = ParamDef("input")


def _named(arg_types) -> tuple[tuple[str, TensorType], ...]:
    return tuple(zip(Clamp.inputs(), arg_types, strict=True))


def _literal(type_: TensorType) -> bool:
    return type_.rank == 0 and type_.storage == StorageKind.UMAT and type_.dtype == f32


def _dtype(op: Clamp, named) -> DType:
    """The shared dtype; a Python float literal (rank-0 umat f32) takes the tensors' float dtype."""
    tensors = [(n, t) for n, t in named if not _literal(t)] or list(named)
    dtype = same_dtype(op, tensors)
    for name, type_ in named:
        if _literal(type_) and not dtype.is_float:
            raise VerifyError(
                f"Clamp: operand '{name}' is a float literal but the tensors are {dtype}; write "
                f"an integer bound or cast x to a float dtype"
            )
    if dtype.is_bool:
        raise VerifyError("Clamp: bool operands have no order to clamp by; cast to a numeric dtype")
    return dtype


_JOINT = {"max": ({"x", "lo"},), "min": ({"x", "hi"}, {"lo", "hi"})}
"""Operand pairs that may pend one reduction on the same mesh axis: max(max_i x_i, max_i lo_i)
is max_i max(x_i, lo_i), then min(., hi) is monotone; min_i of min(max(x_i, lo), hi_i) and of
min(max(x, lo_i), hi_i) work the same way. Every other pair has a two-device counterexample."""


def _refuse_unproven_partials(op: Clamp, named) -> None:
    refuse_partials(
        op,
        named,
        allowed=("max", "min"),
        why="a pending sum does not commute with clamping (clamp is not linear)",
    )
    types = dict(named)
    by_axis: dict[int, dict[str, str]] = {}
    for name, type_ in named:
        for axis, reduction in pending_partials(type_).items():
            by_axis.setdefault(axis, {})[name] = reduction
    for axis, pending in by_axis.items():
        names = set(pending)
        reductions = set(pending.values())
        if len(names) == 1 or (len(reductions) == 1 and names in _JOINT[reductions.pop()]):
            continue
        first, second = sorted(names, key=Clamp.inputs().index)[:2]
        layout = types[first].layout
        raise VerifyError(
            f"Clamp: operands '{first}' (Partial({pending[first]})) and '{second}' "
            f"(Partial({pending[second]})) both pend a reduction on "
            f"{mesh_axis_label(layout.mesh, axis)}; clamp commutes with them together only "
            "for x and lo pending max, or hi with x or lo pending min; "
            f"{completion_remedy(first, layout, axis)}"
        )


@register_typeinfer(Clamp)
def _typeinfer(op: Clamp, arg_types, ctx) -> TensorType:
    named = _named(tensor_operands(op, arg_types))
    dtype = _dtype(op, named)
    _refuse_unproven_partials(op, named)
    out_shape = broadcast_operand_shapes(op, named)
    layout = propagate(op, arg_types, out_shape)
    return TensorType(out_shape, dtype, layout, result_storage(op, arg_types))


@register_access_relation(Clamp)
def _relation(op: Clamp, arg_types):
    named = _named(tensor_operands(op, arg_types))
    out_shape = broadcast_operand_shapes(op, named)
    return elementwise_relations(3, out_shape, tuple(t.shape for _, t in named))


@register_eval(Clamp)
def _eval(op: Clamp, args, out_type: TensorType) -> np.ndarray:
    """`minimum(maximum(x, lo), hi)`, each bound rounded to the result dtype first (a float
    literal adopts it); NaN propagates and -0.0 orders below +0.0, as in StableHLO."""
    target = np.dtype(out_type.dtype.to_numpy())
    x, lo, hi = (np.asarray(a).astype(target, copy=False) for a in args)
    return compute_in_f32(lambda a, b, c: minimum(maximum(a, b), c), out_type.dtype, x, lo, hi)


register_surface("clamp", Clamp)
register_fusion_kind(Clamp, FusionKind.ELEMENTWISE)


@register_vjp(Clamp)
def _vjp(call, ct, ad):
    """JAX's derivative of `jnp.clip` (jax 0.10.2 spells it `minimum(hi, maximum(lo, x))`):
    x receives the cotangent where lo < x < hi, a bound where it is the result, and a tie is
    split evenly, as maximum and minimum split one (x == lo < hi: half to each; lo == x == hi:
    a quarter to x and to lo, half to hi). `lax.clamp`'s own rule drops a tie's cotangent
    instead; the composition is the one users differentiate. Broadcast bounds are summed back."""
    tf = ad.tf
    x, lo, hi = call.args

    @functools.cache
    def raised():
        return tf.maximum(x, lo)

    @functools.cache
    def below_hi():
        """The cotangent of `maximum(x, lo)`: ct where it stays below hi, half on a tie."""
        return tf.mul(ct, extremum_share(ad, raised(), hi, BinaryKind.MIN))

    def lower(chosen, other):
        share = functools.partial(extremum_share, ad, chosen, other, BinaryKind.MAX)
        return lambda: ad.sum_to(tf.mul(below_hi(), share()), chosen.type.shape)

    def upper():
        share = extremum_share(ad, hi, raised(), BinaryKind.MIN)
        return ad.sum_to(tf.mul(ct, share), hi.type.shape)

    return lower(x, lo), lower(lo, x), upper


@register_validation_samples(Clamp)
def _validation_samples() -> list[Sample]:
    x = operand(4, 8)
    return [
        Sample(Clamp(), (x, x, x), "same shapes"),
        Sample(Clamp(), (x, operand(8), operand(1, 8)), "broadcast bounds", False),
    ]


@register_stablehlo(Clamp)
def _stablehlo(op: Clamp, operands, arg_types, out_type, lw):
    """`stablehlo.clamp(lo, x, hi)`, every operand broadcast to the result shape and converted to
    its dtype first; narrow floats run in f32 and round once, like the kernel."""
    shape = lw.shape(out_type)
    x, lo, hi = (
        Value.of(lw, n, t).convert(out_type.dtype).broadcast_to(shape).widened()
        for n, t in zip(operands, arg_types, strict=True)
    )
    name = lw.op(
        f"stablehlo.clamp {lo.name}, {x.name}, {hi.name} : "
        f"({lw.type(lo.type)}, {lw.type(x.type)}, {lw.type(hi.type)}) -> {lw.type(x.type)}"
    )
    return Value(lw, name, x.shape, x.dtype).convert(out_type.dtype).name


@register_pallas(Clamp)
def _pallas(op: Clamp, args, arg_types, out_type, kx):
    dtype = kx.dtype(out_type.dtype)
    x, lo, hi = (kx.jnp.asarray(a).astype(dtype) for a in args)
    return kx.in_f32(lambda a, b, c: kx.minimum(kx.maximum(a, b), c), out_type.dtype, x, lo, hi)
