# ruff: noqa: F821
# Dtype names inside Tensor[...] are strings that ruff reads as forward references.
"""A kernel with two variants over the DimVar `N`: short rows take a direct softmax, long rows
a max-shifted one. The dispatch base declares the envelope [1, 1025); the variants partition it.

`tilefoundry run examples/dispatch_kernel.py --dim N=100` runs the `short` variant,
`--dim N=600` the `long` one; without `--dim`, N is drawn from the seed.
"""

from tilefoundry import DimVar, DimVarRangePat, Tensor, func, module
from tilefoundry.dsl import tf

N = DimVar("N", 1, 1025)


@module
class RowSoftmax:
    @func
    def normalize(x: Tensor[(4, N), "f32"]) -> Tensor[(4, N), "f32"]:
        pass

    @normalize.specialize(DimVarRangePat("N", 1, 512))
    def short(x: Tensor[(4, N), "f32"]) -> Tensor[(4, N), "f32"]:
        e = tf.exp(x)
        return e / tf.reduce(e, axes=(1,), keepdim=True, kind="sum")

    @normalize.specialize(DimVarRangePat("N", 512, 1025))
    def long(x: Tensor[(4, N), "f32"]) -> Tensor[(4, N), "f32"]:
        e = tf.exp(x - tf.reduce(x, axes=(1,), keepdim=True, kind="max"))
        return e / tf.reduce(e, axes=(1,), keepdim=True, kind="sum")

    @func
    def entry(x: Tensor[(4, N), "f32"]):
        return normalize(x)
