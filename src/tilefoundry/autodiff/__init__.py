"""Reverse-mode autodiff: `grad`, `value_and_grad`, `vjp` (DESIGN §3, §4.18; docs/autodiff.md).

The transform turns a Function into an ordinary typed HIR Function. One module per concern:
`api` (the three transforms and their signatures), `calls` (call sites: @func calls inlined per
elaborated site), `backward` (the reverse walk, calling each op's registered VJP rule),
`cotangents` (fan-out contributions summed in their own types), `reshard_policy` (where the
backward program communicates), `builder` (what a VJP rule builds its ops with), `varied`
(which values carry cotangents), `rewrite` (graph substitution), `loops` and `residuals` (a loop
differentiates as a scan), `remat` (`checkpoint`: the backward recomputes a call's forward).
"""

from tilefoundry.autodiff.api import grad, value_and_grad, vjp
from tilefoundry.autodiff.builder import Builder
from tilefoundry.autodiff.remat import checkpoint

__all__ = ["Builder", "checkpoint", "grad", "value_and_grad", "vjp"]
