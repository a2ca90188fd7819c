# ruff: noqa: F821
# Dtype names in Tensor[...] are strings that ruff reads as forward references.
"""Programs for the ops whose mesh semantics the SPMD exit lowers by their own rules (Reshape head
split and merge, RoPE, Gather over a split vocabulary, batched too, CacheUpdate, InsertSlice,
Concat, Stack, ShapeOf, Rank), each with an independent float64 numpy oracle and the collectives
it must emit.

`run(name, arrays)` runs one by name inside the 8-device worker (tests/conftest.py), so only
names and arrays cross the process boundary.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilefoundry.dsl import tf
from tilefoundry.frontend import Tensor, func
from tilefoundry.ir.hir import Function
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((4,), ("tp",))
GRID = make_mesh((2, 2), ("dp", "tp"))


ATTENTION_OUT = ShardLayout(Layout((2, 4, 32)), (B,), TP)
EMBEDDED = ShardLayout(Layout((6, 8)), (B,), TP)
EMBEDDED_2D = ShardLayout(Layout((2, 3, 8)), (B, B), GRID)
COLUMNS = ShardLayout(Layout((4, 5)), (B,), TP)
TARGETS = ShardLayout(Layout((6, 1)), (B,), TP)


@dataclass(frozen=True)
class OpProgram:
    fn: Function
    oracle: Callable[..., object]
    inputs: Callable[[np.random.Generator], tuple]
    collectives: tuple[str, ...]


def normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- Megatron attention: heads split by reshape, rope, merged back, one all-reduce ------------


@func
def tp_attention(
    x: Tensor[(2, 4, 32), "f32"],
    wq: Tensor[(32, 32 @ TP.tp), "f32"],
    wk: Tensor[(32, 32 @ TP.tp), "f32"],
    wv: Tensor[(32, 32 @ TP.tp), "f32"],
    wo: Tensor[(32 @ TP.tp, 32), "f32"],
    cos: Tensor[(8, 8), "f32"],
    sin: Tensor[(8, 8), "f32"],
    pos: Tensor[(4,), "i32"],
):
    q = tf.transpose(tf.reshape(x @ wq, (2, 4, 4, 8)), (0, 2, 1, 3))
    k = tf.transpose(tf.reshape(x @ wk, (2, 4, 4, 8)), (0, 2, 1, 3))
    v = tf.transpose(tf.reshape(x @ wv, (2, 4, 4, 8)), (0, 2, 1, 3))
    q, k = tf.rope(q, k, cos, sin, pos)
    scores = q @ tf.transpose(k, (0, 1, 3, 2)) * 0.35
    heads = tf.softmax(scores, axis=-1) @ v
    merged = tf.reshape(tf.transpose(heads, (0, 2, 1, 3)), (2, 4, 32))
    return tf.reshard(merged @ wo, layout=ATTENTION_OUT, storage="gmem")


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + np.concatenate([-x[..., half:], x[..., :half]], axis=-1) * sin


def tp_attention_oracle(x, wq, wk, wv, wo, cos, sin, pos):
    x, wq, wk, wv, wo, cos, sin = (a.astype(np.float64) for a in (x, wq, wk, wv, wo, cos, sin))
    q, k, v = ((x @ w).reshape(2, 4, 4, 8).transpose(0, 2, 1, 3) for w in (wq, wk, wv))
    q, k = _rotate(q, cos[pos], sin[pos]), _rotate(k, cos[pos], sin[pos])
    scores = q @ k.transpose(0, 1, 3, 2) * 0.35
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    heads = weights / weights.sum(-1, keepdims=True) @ v
    return heads.transpose(0, 2, 1, 3).reshape(2, 4, 32) @ wo


# ---- vocab-parallel embedding: a masked local lookup, then one all-reduce ----------------------


@func
def vocab_embedding(table: Tensor[(32 @ TP.tp, 8), "f32"], ids: Tensor[(6,), "i32"]):
    rows = tf.gather(table, ids, axis=0)
    return tf.reshard(rows, layout=EMBEDDED, storage="gmem")


@func
def vocab_on_one_axis_of_two(table: Tensor[(32 @ GRID.tp, 8), "f32"], ids: Tensor[(2, 3), "i32"]):
    rows = tf.gather(table, ids, axis=0)
    return tf.reshard(rows, layout=EMBEDDED_2D, storage="gmem")


@func
def gather_columns(x: Tensor[(4, 16 @ TP.tp), "f32"], ids: Tensor[(5,), "i32"]):
    picked = tf.gather(x, ids, axis=1)
    return tf.reshard(picked, layout=COLUMNS, storage="gmem")


# ---- batched gathers (issue 29): the target logit over a split vocabulary, and a gather of each
# device's own batch rows at its own indices ---------------------------------------------------


@func
def target_logit(logits: Tensor[(6, 16 @ TP.tp), "f32"], targets: Tensor[(6, 1), "i32"]):
    picked = tf.gather(logits, targets, axis=1, batch_dims=1)
    return tf.reshard(picked, layout=TARGETS, storage="gmem")


@func
def own_rows(x: Tensor[(8 @ GRID.dp, 6, 4 @ GRID.tp), "f32"], ids: Tensor[(8 @ GRID.dp, 3), "i32"]):
    return tf.gather(x, ids, axis=1, batch_dims=1)


def own_rows_oracle(x, ids):
    return np.take_along_axis(x, ids[:, :, None], axis=1)


# ---- decode step: the KV cache written with its heads sharded, no communication ---------------


@func
def decode_cache(
    cache: Tensor[(2, 8, 4 @ TP.tp, 8), "f32"],
    cur_pos: Tensor[(), "i32"],
    count: Tensor[(), "i32"],
    new: Tensor[(2, 2, 4 @ TP.tp, 8), "f32"],
):
    return tf.cache_update(cache, cur_pos, count, new)


def decode_cache_oracle(cache, cur_pos, count, new):
    out = cache.copy()
    out[:, int(cur_pos) : int(cur_pos) + int(count)] = new[:, : int(count)]
    return out


# ---- joins, windows and shape metadata on a 2-D mesh -------------------------------------------


@func
def joins(x: Tensor[(8 @ GRID.dp, 4 @ GRID.tp, 2), "f32"], y: Tensor[(8, 4, 3), "f32"]):
    side = tf.concat((x, y), axis=2)
    stacked = tf.stack((x, tf.relu(x)), axis=1)
    written = tf.insert_slice(x, tf.neg(x), (0, 0, 0))
    return side, stacked, written, tf.shape_of(side), tf.rank(stacked)


def joins_oracle(x, y):
    return (
        np.concatenate([x, y], axis=2),
        np.stack([x, np.maximum(x, 0)], axis=1),
        -x,
        np.array([8, 4, 5], np.int64),
        np.array(4, np.int64),
    )


@func
def window(dst: Tensor[(8 @ GRID.dp, 8), "f32"], update: Tensor[(8 @ GRID.dp, 4), "f32"]):
    return tf.insert_slice(dst, update, (0, 3))


def window_oracle(dst, update):
    out = dst.copy()
    out[:, 3:7] = update
    return out


PROGRAMS = {
    "tp_attention": OpProgram(
        tp_attention,
        tp_attention_oracle,
        lambda rng: (
            normal(rng, 2, 4, 32),
            *(normal(rng, 32, 32) * 0.3 for _ in range(4)),
            normal(rng, 8, 8),
            normal(rng, 8, 8),
            np.array([5, 0, 7, 2], np.int32),
        ),
        ("all_reduce",),
    ),
    "vocab_embedding": OpProgram(
        vocab_embedding,
        lambda table, ids: table[ids],
        lambda rng: (normal(rng, 32, 8), np.array([0, 31, 8, 7, 16, 8], np.int32)),
        ("all_reduce",),
    ),
    "vocab_on_one_axis_of_two": OpProgram(
        vocab_on_one_axis_of_two,
        lambda table, ids: table[ids],
        lambda rng: (normal(rng, 32, 8), np.array([[0, 31, 9], [8, 23, 16]], np.int32)),
        ("all_reduce",),
    ),
    "gather_columns": OpProgram(
        gather_columns,
        lambda x, ids: x[:, ids],
        lambda rng: (normal(rng, 4, 16), np.array([15, 0, 4, 3, 12], np.int32)),
        ("all_reduce",),
    ),
    "target_logit": OpProgram(
        target_logit,
        lambda logits, targets: np.take_along_axis(logits, targets, axis=1),
        lambda rng: (normal(rng, 6, 16), np.array([[0], [15], [4], [3], [12], [8]], np.int32)),
        ("all_reduce",),
    ),
    "own_rows": OpProgram(
        own_rows,
        own_rows_oracle,
        lambda rng: (normal(rng, 8, 6, 4), rng.integers(0, 6, (8, 3)).astype(np.int32)),
        (),
    ),
    "decode_cache": OpProgram(
        decode_cache,
        decode_cache_oracle,
        lambda rng: (
            normal(rng, 2, 8, 4, 8),
            np.array(5, np.int32),
            np.array(2, np.int32),
            normal(rng, 2, 2, 4, 8),
        ),
        (),
    ),
    "joins": OpProgram(
        joins,
        joins_oracle,
        lambda rng: (normal(rng, 8, 4, 2), normal(rng, 8, 4, 3)),
        (),
    ),
    "window": OpProgram(
        window, window_oracle, lambda rng: (normal(rng, 8, 8), normal(rng, 8, 4)), ()
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
