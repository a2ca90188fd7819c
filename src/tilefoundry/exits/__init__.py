"""Exits: where HIR leaves the compiler. The emitters (`stablehlo`: one device and SPMD) write
StableHLO text; the runtimes (`runtimes`: XLA on one or N devices, IREE, several processes) run
it; `pallas` lowers and runs cta-mesh kernels.

`tilefoundry.exits.xla` is DESIGN §3's name for the XLA runtime: it is bound to `runtimes.xla`
itself (the same module object, so one executable cache), not to a copy.
"""

import sys

from tilefoundry.exits.runtimes import xla

sys.modules[f"{__name__}.xla"] = xla

__all__ = ["xla"]
