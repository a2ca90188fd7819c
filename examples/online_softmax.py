# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""Row softmax with an online max and sum over column tiles (the flash-attention recurrence).

One pass over the column tiles keeps, per row, the running maximum `m` and the running sum `l`
of `exp(x - m)`: when a tile raises the maximum, the sum so far is rescaled by `exp(m - m_new)`.
After the loop `exp(x - m) / l` is the softmax, without ever holding a row's exponentials at once.
`x[:, j]` reads tile j (DESIGN §4.14); inside the loop `compile` fuses each tile's elementwise
work into its reductions.
"""

from tilefoundry import Tensor, func, tile
from tilefoundry.dsl import tf

ROWS, COLS, TILE = 8, 64, 16
LOWEST = -1e30  # below every input: exp(LOWEST - m) is exactly 0


@func
def online_softmax(x: Tensor[(ROWS, COLS), "f32"]):
    m = tf.zeros((ROWS, 1), "f32") + LOWEST
    l = tf.zeros((ROWS, 1), "f32")
    for j in tile(COLS, TILE):
        s = x[:, j]
        m_new = tf.maximum(m, tf.reduce(s, axes=(1,), keepdim=True, kind="max"))
        tile_sum = tf.reduce(tf.exp(s - m_new), axes=(1,), keepdim=True, kind="sum")
        l = l * tf.exp(m - m_new) + tile_sum
        m = m_new
    return tf.exp(x - m) / l
