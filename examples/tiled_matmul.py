# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A tiled matmul: the contraction axis walked one K tile at a time into an rmem accumulator.

`for k in tile(INNER, TILE_K)` binds `k` to the window `[k, k + TILE_K)` (parser §1.7), so
`a[:, k]` and `b[k]` read this iteration's tiles (DynamicSlice, DESIGN §4.14): nothing is gathered
or unrolled. Each tile product lands in registers (`reshard(..., layout=Layout(shape),
storage="rmem")`: a storage change names its layout, and the `Layout(shape)` sugar lets the
direction choose the strides, hir Reshard) and is added to the accumulator carried by the loop.
`compile` fuses the two tile reads into the tile matmul inside the loop body.
"""

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import Layout

ROWS, INNER, COLS, TILE_K = 16, 64, 16, 16
TILE = Layout((ROWS, COLS))


@func
def tiled_matmul(a: Tensor[(ROWS, INNER), "f32"], b: Tensor[(INNER, COLS), "f32"]):
    acc = tf.zeros((ROWS, COLS), "f32", storage="rmem")
    for k in tile(INNER, TILE_K):
        acc = acc + tf.reshard(a[:, k] @ b[k], layout=TILE, storage="rmem")
    return tf.reshard(acc, layout=TILE, storage="gmem")
