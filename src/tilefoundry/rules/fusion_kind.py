"""The roles an op can play in producer->consumer fusion (SFEP-0053 §3.5)."""

from __future__ import annotations

import enum


class FusionKind(enum.Enum):
    ELEMENTWISE = "elementwise"
    """Pure pointwise math: fuses freely into chains and into one root."""
    VIEW = "view"
    """Broadcast / reshape / slice / transpose: joins a region only when it is view-like, i.e.
    expressible as an index map without an intervening copy (the pass decides per call)."""
    REDUCTION = "reduction"
    """A root: elementwise producers fuse into it; two roots never fuse together."""
    CONTRACTION = "contraction"
    """A root like REDUCTION (matmul, convolution)."""
    BARRIER = "barrier"
    """Never fused: copies, Reshard, data-dependent or multi-output ops, shape queries."""
