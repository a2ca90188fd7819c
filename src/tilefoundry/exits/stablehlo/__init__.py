"""The StableHLO emitters: HIR as version-pinned StableHLO text (SFEP-0053 §3.7).

`one_device` writes the single-device module, `spmd` the sharded module for a device mesh
(Shardy manual computation, explicit collectives), and `emit_stablehlo` picks between them
(DESIGN §3: one emitter for both). `jaxlib_tools` has jaxlib judge and serialise the text.
Emitting is pure text generation: nothing here imports jax eagerly or any runtime.
"""

from tilefoundry.exits.stablehlo.module_header import STABLEHLO_TARGET_VERSION
from tilefoundry.exits.stablehlo.one_device import emit_stablehlo

__all__ = ["STABLEHLO_TARGET_VERSION", "emit_stablehlo"]
