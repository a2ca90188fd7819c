# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A tiled row reduction: the sum and the max of each row, accumulated one column tile at a time.

`for t in range(TILES)` is one GridRegionExpr with two loop carries (`total`, `peak`); nothing is
unrolled. Each step selects its tile with `gather` at the induction variable, so the loop body
reads a (ROWS, 1, TILE) window and folds it into both carries.
"""

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

ROWS, COLS, TILE = 8, 256, 64
TILES = COLS // TILE


@func
def tiled_row_stats(x: Tensor[(ROWS, COLS), "f32"]):
    tiles = tf.reshape(x, (ROWS, TILES, TILE))
    total = tf.zeros((ROWS, 1), "f32")
    peak = tf.reduce(tf.gather(tiles, 0, axis=1), axes=(1,), keepdim=True, kind="max")
    for t in range(TILES):
        window = tf.gather(tiles, t, axis=1)
        total = total + tf.reduce(window, axes=(1,), keepdim=True, kind="sum")
        peak = tf.maximum(peak, tf.reduce(window, axes=(1,), keepdim=True, kind="max"))
    return total, peak
