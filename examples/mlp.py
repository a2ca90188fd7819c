# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A two-layer MLP with biases: the smallest program that shows fusion at work.

The bias add and the GELU fuse into the second matmul as one contraction region
(`tilefoundry show examples/mlp.py --fused`).
"""

from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

BATCH, IN, HIDDEN, OUT = 8, 32, 64, 16


@func
def mlp(
    x: Tensor[(BATCH, IN), "f32"],
    w1: Tensor[(IN, HIDDEN), "f32"],
    b1: Tensor[(HIDDEN,), "f32"],
    w2: Tensor[(HIDDEN, OUT), "f32"],
    b2: Tensor[(OUT,), "f32"],
):
    h = tf.gelu(x @ w1 + b1)
    return h @ w2 + b2
