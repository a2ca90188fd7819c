# ruff: noqa: F821
# Dtype names in Tensor[...] are strings that ruff reads as forward references.
"""Programs for the structural ops on a device mesh (ScatterAdd's and OptimizationBarrier's own
SPMD rules, and the ops the default block lowering runs: Pad, Reverse, Cumulative, Clamp, each
carrying a Split or a pending sum), each with an independent float64 numpy oracle and the
collectives it must emit.

`run(name, arrays)` runs one by name inside the 8-device worker (conftest.py), so only names and
arrays cross the process boundary.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

EP = make_mesh((8,), ("ep",))
TP = make_mesh((8,), ("tp",))
GRID = make_mesh((2, 4), ("dp", "tp"))

TOKENS = ShardLayout(Layout((16, 4)), (B,), EP)


@dataclass(frozen=True)
class StructuralProgram:
    fn: Function
    oracle: Callable[..., object]
    inputs: Callable[[np.random.Generator], tuple]
    collectives: tuple[str, ...]


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _add_at(x, indices, updates, axis=0):
    out = np.array(x, np.float64)
    np.add.at(out, (slice(None),) * axis + (indices,), updates)
    return out


# ---- MoE combine: each device holds its experts' outputs and their token positions ------------


@func
def moe_combine(slots: Tensor[(8 @ EP.ep, 2), "i32"], expert_out: Tensor[(8 @ EP.ep, 2, 4), "f32"]):
    tokens = tf.scatter_add(tf.zeros((16, 4), "f32"), slots, expert_out, axis=0)
    return tf.reshard(tokens, layout=TOKENS, storage="gmem")


# ---- the gradient of a vocab-parallel embedding: each device adds the rows it owns ------------


@func
def vocab_gradient(
    table: Tensor[(32 @ TP.tp, 8), "f32"], ids: Tensor[(6,), "i32"], dy: Tensor[(6, 8), "f32"]
):
    return tf.scatter_add(table, ids, dy, axis=0)


# ---- columns carried from the updates, and a batched scatter split on its batch axis ----------


@func
def column_gradient(ids: Tensor[(6,), "i32"], dy: Tensor[(6, 16 @ TP.tp), "f32"]):
    return tf.scatter_add(tf.zeros((12, 16), "f32"), ids, dy, axis=0)


@func
def batched_rows(
    x: Tensor[(4 @ GRID.dp, 8, 8 @ GRID.tp), "f32"],
    ids: Tensor[(4 @ GRID.dp, 5), "i32"],
    rows: Tensor[(4, 5, 8 @ GRID.tp), "f32"],
):
    return tf.scatter_add(x, ids, rows, axis=1, batch_dims=1)


def _batched_oracle(x, ids, rows):
    out = np.array(x, np.float64)
    for b in range(x.shape[0]):
        np.add.at(out[b], ids[b], rows[b])
    return out


# ---- pad, reverse, cumsum and clamp along unsplit axes: the Splits carry, nothing moves -------


@func
def along_unsplit_axes(x: Tensor[(8 @ GRID.dp, 6, 8 @ GRID.tp), "f32"], lo: Tensor[(8,), "f32"]):
    padded = tf.pad(x, (0, 1, 0), (0, 1, 0), value=0.0)
    scanned = tf.cumsum(tf.reverse(padded, (1,)), 1)
    return tf.clamp(scanned, lo, 1.5)


def _along_unsplit_oracle(x, lo):
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (0, 0)))
    return np.clip(np.cumsum(padded[:, ::-1], axis=1), lo, 1.5)


# ---- a row-parallel product pends a sum; a zero pad and a cumsum keep it pending ----------------

ROWS = ShardLayout(Layout((4, 10)), (B,), TP)


@func
def pending_sum_scanned(x: Tensor[(4, 16 @ TP.tp), "f32"], w: Tensor[(16 @ TP.tp, 8), "f32"]):
    running = tf.cumsum(tf.pad(x @ w, (0, 1), (0, 1)), 1)
    return tf.reshard(running, layout=ROWS, storage="gmem")


def _pending_sum_oracle(x, w):
    product = x.astype(np.float64) @ w
    return np.cumsum(np.pad(product, ((0, 0), (1, 1))), axis=1)


# ---- an optimization barrier carries a Split and a pending sum as they are --------------------


@func
def barriered_pending_sum(x: Tensor[(4, 16 @ TP.tp), "f32"], w: Tensor[(16 @ TP.tp, 8), "f32"]):
    product, split = tf.optimization_barrier((x @ w, x))
    total = tf.reshard(product, layout=ShardLayout(Layout((4, 8)), (B,), TP), storage="gmem")
    return total + tf.reduce(split, axes=(1,), keepdim=True, kind="sum")


def _barriered_oracle(x, w):
    return x.astype(np.float64) @ w + x.astype(np.float64).sum(axis=1, keepdims=True)


PROGRAMS = {
    "barriered_pending_sum": StructuralProgram(
        barriered_pending_sum,
        _barriered_oracle,
        lambda rng: (normal(rng, 4, 16), normal(rng, 16, 8)),
        ("all_reduce", "all_reduce"),
    ),
    "along_unsplit_axes": StructuralProgram(
        along_unsplit_axes,
        _along_unsplit_oracle,
        lambda rng: (normal(rng, 8, 6, 8), normal(rng, 8) * 0.5 - 1.0),
        (),
    ),
    "pending_sum_scanned": StructuralProgram(
        pending_sum_scanned,
        _pending_sum_oracle,
        lambda rng: (normal(rng, 4, 16), normal(rng, 16, 8)),
        ("all_reduce",),
    ),
    "moe_combine": StructuralProgram(
        moe_combine,
        lambda slots, out: _add_at(np.zeros((16, 4)), slots, out),
        lambda rng: (rng.integers(0, 16, (8, 2)).astype(np.int32), normal(rng, 8, 2, 4)),
        ("all_reduce",),
    ),
    "vocab_gradient": StructuralProgram(
        vocab_gradient,
        _add_at,
        lambda rng: (
            normal(rng, 32, 8),
            np.array([0, 31, 8, 7, 8, 16], np.int32),
            normal(rng, 6, 8),
        ),
        (),
    ),
    "column_gradient": StructuralProgram(
        column_gradient,
        lambda ids, dy: _add_at(np.zeros((12, 16)), ids, dy),
        lambda rng: (np.array([11, 0, 3, 3, 5, 11], np.int32), normal(rng, 6, 16)),
        (),
    ),
    "batched_rows": StructuralProgram(
        batched_rows,
        _batched_oracle,
        lambda rng: (
            normal(rng, 4, 8, 8),
            rng.integers(0, 8, (4, 5)).astype(np.int32),
            normal(rng, 4, 5, 8),
        ),
        (),
    ),
}


def inputs(name: str) -> tuple:
    return PROGRAMS[name].inputs(np.random.default_rng(sum(map(ord, name))))


def run(name: str, arrays: tuple):
    """Inside the worker: the program on as many XLA devices as its mesh has."""
    from tilefoundry.exits.runtimes.xla import run_xla

    fn = PROGRAMS[name].fn
    mesh = next(p.type.layout.mesh for p in fn.params if isinstance(p.type.layout, ShardLayout))
    return run_xla(fn, *arrays, devices=int(np.prod(mesh.shape)))
