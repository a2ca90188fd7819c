"""Optimizers written in the DSL: SGD with momentum, AdamW, and their ZeRO-1 variants.

An optimizer update is an ordinary typed `@func`, so it type-checks, prints, runs on every exit
and can be called inside a training step. One `@func` cannot be generic over *how many*
parameters a model has, nor over their shardings (a DimVar abstracts an extent, not a layout),
so each optimizer is a Python factory: given the parameters' types it writes the update's
source, one block of elementwise lines per parameter, and parses it with those types as the
annotations (docs/training.md says why this over DimVars and elaboration per call site). The
update's signature is flat, the form every runtime takes:

    update(p_0.., g_0.., <state>_0.., ..., step) -> (p_0'.., <state>_0'.., ...)

`step` is the rank-0 i32 number of the step being taken (1 for the first), the count of AdamW's
bias correction. Every optimizer state has its parameter's type, except in the ZeRO-1 variant
(`zero_axis=`): there each state, and the update, is split over that data-parallel mesh axis;
the pending gradient (`Partial(sum)` over it) is reduce-scattered into that split and the updated
parameter all-gathered, each a Reshard the type checker checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilefoundry.errors import VerifyError
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types import TensorType, make_shard_tensor_type
from tilefoundry.ir.types.shard import B, Broadcast, P, S, ShardLayout


@dataclass(frozen=True)
class Optimizer:
    """An optimizer built for one parameter signature."""

    name: str
    update: Function
    """(params.., grads.., each state's tensors.., step) -> (params'.., each state's'..)."""
    param_types: tuple[TensorType, ...]
    grad_types: tuple[TensorType, ...]
    state_names: tuple[str, ...]
    state_types: tuple[TensorType, ...]
    """Per parameter: the type of each of its states (all of one parameter's states share it)."""

    def init(self) -> tuple[np.ndarray, ...]:
        """The initial state, flat in the update's order: zeros of each state's global shape."""
        return tuple(
            np.zeros(tuple(t.shape), t.dtype.to_numpy())
            for _ in self.state_names
            for t in self.state_types
        )


def sgd(
    param_types: Sequence[TensorType],
    *,
    learning_rate: float,
    momentum: float = 0.9,
    grad_types: Sequence[TensorType] | None = None,
    zero_axis: str | None = None,
) -> Optimizer:
    """SGD with (heavy-ball) momentum, optax.sgd's formula: m = g + momentum m; p -= lr m."""
    lines = (
        "    m{i} = g{i} + m{i} * MOMENTUM",
        "    p{i} = p{i} - m{i} * LEARNING_RATE",
    )
    constants = {"MOMENTUM": momentum, "LEARNING_RATE": learning_rate}
    return _build("sgd", ("m",), lines, (), constants, param_types, grad_types, zero_axis)


def adamw(
    param_types: Sequence[TensorType],
    *,
    learning_rate: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 1e-4,
    grad_types: Sequence[TensorType] | None = None,
    zero_axis: str | None = None,
) -> Optimizer:
    """AdamW with optax.adamw's formulas and defaults (eps outside the root, decoupled weight
    decay added to the bias-corrected update before the learning rate scales it)."""
    prologue = (
        '    t = tf.cast(step, "f32")',
        "    correction1 = 1.0 - tf.pow(B1, t)",
        "    correction2 = 1.0 - tf.pow(B2, t)",
    )
    lines = (
        "    mu{i} = g{i} * (1.0 - B1) + mu{i} * B1",
        "    nu{i} = (g{i} * g{i}) * (1.0 - B2) + nu{i} * B2",
        "    update{i} = (mu{i} / correction1) / (tf.sqrt(nu{i} / correction2) + EPS)",
        "    p{i} = p{i} - (update{i} + p{i} * WEIGHT_DECAY) * LEARNING_RATE",
    )
    constants = {
        "B1": b1,
        "B2": b2,
        "EPS": eps,
        "WEIGHT_DECAY": weight_decay,
        "LEARNING_RATE": learning_rate,
    }
    return _build("adamw", ("mu", "nu"), lines, prologue, constants, param_types, grad_types,
                  zero_axis)  # fmt: skip


def _build(
    name: str,
    states: tuple[str, ...],
    lines: tuple[str, ...],
    prologue: tuple[str, ...],
    constants: dict,
    param_types: Sequence[TensorType],
    grad_types: Sequence[TensorType] | None,
    zero_axis: str | None,
) -> Optimizer:
    from tilefoundry.frontend import parse_source

    params = tuple(param_types)
    grads = params if grad_types is None else tuple(grad_types)
    if len(grads) != len(params):
        raise VerifyError(
            f"{name}: {len(params)} parameter type(s) but {len(grads)} gradient type(s); pass "
            "one gradient type per parameter"
        )
    if zero_axis is None:
        state_types = params
    else:
        state_types = tuple(_zero_type(name, i, t, zero_axis) for i, t in enumerate(params))
    namespace = {**constants}
    signature, body, results = [], [*prologue], []
    for i, (p, g, s) in enumerate(zip(params, grads, state_types, strict=True)):
        namespace |= {f"P{i}": _annotation(p), f"G{i}": _annotation(g), f"S{i}": _annotation(s)}
        namespace |= {f"SHARD{i}": s.layout, f"WHOLE{i}": p.layout}
        if g != s:  # complete the pending gradient into the state's placement
            body.append(f"    g{i} = tf.reshard(g{i}, layout=SHARD{i})")
        if p != s:  # ZeRO: this device's slice of the replicated parameter (no communication)
            body.append(f"    p{i} = tf.reshard(p{i}, layout=SHARD{i})")
        body += [line.format(i=i) for line in lines]
        if p != s:
            body.append(f"    p{i} = tf.reshard(p{i}, layout=WHOLE{i})")
    count = len(params)
    signature += [f"p{i}: P{i}" for i in range(count)] + [f"g{i}: G{i}" for i in range(count)]
    for state in states:
        signature += [f"{state}{i}: S{i}" for i in range(count)]
    signature.append('step: Tensor[(), "i32"]')
    results = [f"p{i}" for i in range(count)]
    for state in states:
        results += [f"{state}{i}" for i in range(count)]
    source = "\n".join(
        [
            "from tilefoundry.frontend import Tensor, func",
            "from tilefoundry.dsl import tf",
            "",
            "",
            "@func",
            f"def {name}_update(",
            *(f"    {entry}," for entry in signature),
            "):",
            *body,
            f"    return ({', '.join(results)},)",
            "",
        ]
    )
    update = parse_source(source, f"<tilefoundry.optim.{name}>", namespace)[f"{name}_update"]
    return Optimizer(name, update, params, grads, states, state_types)


def _annotation(type_: TensorType):
    from tilefoundry.frontend import Tensor

    if type_.layout is None:
        return Tensor[tuple(type_.shape), type_.dtype]
    return Tensor[tuple(type_.shape), type_.dtype, type_.layout]


def _zero_type(name: str, index: int, type_: TensorType, axis: str) -> TensorType:
    """The ZeRO-1 state type of a parameter replicated over its mesh: split over mesh axis
    `axis` along its first logical axis that the axis extent divides."""
    layout = type_.layout
    where = f"{name}: parameter {index} ({type_.shape})"
    if not isinstance(layout, ShardLayout):
        raise VerifyError(
            f"{where} has no mesh; ZeRO splits the state over mesh axis '{axis}' of the "
            "parameter's mesh: give the parameter a replicated ShardLayout"
        )
    mesh = layout.mesh
    names = [a.name for a in mesh.axes]
    if axis not in names:
        raise VerifyError(f"{where}: its mesh has axes {names}, not the ZeRO axis '{axis}'")
    if not all(isinstance(a, Broadcast) for a in layout.attrs):
        raise VerifyError(
            f"{where} is sharded ({layout.attrs}); this ZeRO-1 variant splits only parameters "
            "replicated over their mesh; keep it out of the ZeRO optimizer"
        )
    extent = mesh.axes[names.index(axis)].size
    dims = [d for d, n in enumerate(type_.shape) if isinstance(n, int) and n % extent == 0]
    if not dims:
        raise VerifyError(
            f"{where}: no axis divides by the {extent} devices of mesh axis '{axis}'; pad it "
            "or keep it out of the ZeRO optimizer"
        )
    attrs = [S(dims[0]) if n == axis else B for n in names]
    return make_shard_tensor_type(type_.shape, type_.dtype, mesh=mesh, attrs=attrs)


def pending_type(type_: TensorType, axis: str) -> TensorType:
    """The type of a replicated parameter's gradient left pending (`Partial(sum)`) over mesh
    axis `axis`: what `grad(..., reduce_gradients=False)` returns for a data-parallel weight."""
    mesh = type_.layout.mesh
    attrs = [P("sum") if a.name == axis else B for a in mesh.axes]
    return make_shard_tensor_type(type_.shape, type_.dtype, mesh=mesh, attrs=attrs)


def training_step(loss: Function, optimizer: Optimizer, data: int) -> Function:
    """One training step as a `@func`: `loss`'s value and gradients (`value_and_grad` over every
    parameter after the first `data`, which are the batch) and `optimizer`'s update of them.

        train_step(data_0.., p_0.., <state>_0.., ..., step) -> (loss, p_0'.., <state>_0'.., ...)

    The optimizer must be built for `loss`'s parameters; the gradients' types (replicated
    parameters get replicated, reduced gradients) are checked against its `grad_types` by the
    update's own signature where the step calls it."""
    from tilefoundry.autodiff import value_and_grad
    from tilefoundry.frontend import parse_source

    params = loss.params[data:]
    if tuple(p.type for p in params) != optimizer.param_types:
        raise VerifyError(
            f"training_step: {optimizer.name} was built for {len(optimizer.param_types)} "
            f"parameter type(s) that are not {loss.name}'s after its {data} data parameter(s); "
            f"build it with [p.type for p in {loss.name}.params[{data}:]]"
        )
    count = len(params)
    names = [p.name for p in loss.params]
    states = [f"{s}_{p.name}" for s in optimizer.state_names for p in params]
    namespace = {f"T{i}": _annotation(p.type) for i, p in enumerate(loss.params)}
    namespace |= {f"S{i}": _annotation(t) for i, t in enumerate(optimizer.state_types)}
    namespace |= {
        "GRADIENTS": value_and_grad(loss, argnums=tuple(range(data, data + count))),
        "UPDATE": optimizer.update,
    }
    signature = [f"{n}: T{i}" for i, n in enumerate(names)]
    signature += [f"{s}: S{i % count}" for i, s in enumerate(states)]
    signature.append('step: Tensor[(), "i32"]')
    grads = [f"d_{p.name}" for p in params]
    new = [f"new_{n}" for n in (*names[data:], *states)]
    source = "\n".join(
        [
            "from tilefoundry.frontend import Tensor, func",
            "",
            "",
            "@func",
            "def train_step(",
            *(f"    {entry}," for entry in signature),
            "):",
            f"    value, ({', '.join(grads)},) = GRADIENTS({', '.join(names)})",
            f"    {', '.join(new)} = UPDATE({', '.join([*names[data:], *grads, *states])}, step)",
            f"    return ({', '.join(['value', *new])},)",
            "",
        ]
    )
    return parse_source(source, f"<tilefoundry.optim.training_step:{loss.name}>", namespace)[
        "train_step"
    ]
