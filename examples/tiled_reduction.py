# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A tiled row reduction: the sum and the max of each row, accumulated one column tile at a time.

`for t in tile(COLS, TILE)` is one GridRegionExpr with two loop carries (`total`, `peak`);
nothing is unrolled. `t` is the window `[t, t + TILE)` (parser §1.7), so `x[:, t]` reads this
step's (ROWS, TILE) tile directly (DESIGN §4.14) and the body folds it into both carries.
"""

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf

ROWS, COLS, TILE = 8, 256, 64


@func
def tiled_row_stats(x: Tensor[(ROWS, COLS), "f32"]):
    total = tf.zeros((ROWS, 1), "f32")
    peak = tf.reduce(x[:, 0:TILE], axes=(1,), keepdim=True, kind="max")
    for t in tile(COLS, TILE):
        window = x[:, t]
        total = total + tf.reduce(window, axes=(1,), keepdim=True, kind="sum")
        peak = tf.maximum(peak, tf.reduce(window, axes=(1,), keepdim=True, kind="max"))
    return total, peak
