# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A 2-D mesh (2 x 4 devices) mixing Split and Partial in one value.

Rows of `a` are split over `x` and its columns over `y`; `w` is split over `y` on the contraction
axis. The matmul's result is therefore split over `x` *and* a pending sum over `y`: each device
holds a slice of the rows and a partial sum of them. The Reshard completes the sum over `y`
(an all-reduce within each `x` row of devices) and keeps the row split.
"""

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

MESH = make_mesh((2, 4), ("x", "y"))
ROWS, INNER, COLS = 16, 32, 8


@func
def mesh_2d(
    a: Tensor[(ROWS @ MESH.x, INNER @ MESH.y), "f32"],
    w: Tensor[(INNER @ MESH.y, COLS), "f32"],
):
    partial = a @ w
    rows = tf.reshard(partial, layout=(ROWS @ MESH.x, COLS), storage="gmem")
    return tf.relu(rows)
