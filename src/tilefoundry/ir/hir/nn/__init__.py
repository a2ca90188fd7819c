"""HIR nn ops (hir §1.3 ir/hir/nn)."""

from tilefoundry.ir.hir.nn.activations import Gelu, ReLU, Sigmoid, Silu, Tanh
from tilefoundry.ir.hir.nn.conv2d import Conv2D
from tilefoundry.ir.hir.nn.matmul import MatMul
from tilefoundry.ir.hir.nn.norms import LayerNorm, RMSNorm
from tilefoundry.ir.hir.nn.rope import RoPE
from tilefoundry.ir.hir.nn.softmax import SoftMax

__all__ = [
    "Conv2D",
    "Gelu",
    "LayerNorm",
    "MatMul",
    "RMSNorm",
    "ReLU",
    "RoPE",
    "Sigmoid",
    "Silu",
    "SoftMax",
    "Tanh",
]
