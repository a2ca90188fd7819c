"""The SPMD exit: sharded programs on a "device" mesh as Shardy manual computations.

`module` walks the function and writes the per-device body; `call` lowers one op on local
shapes; `collectives` and `reshard` write the communication the IR asks for; `mesh` maps the
IR mesh onto Shardy's; `xla` runs the module on N XLA devices.
"""

from tilefoundry.exits.stablehlo.spmd.module import (
    SpmdModule,
    collective_report,
    emit_spmd,
    format_collective_report,
    lower_spmd,
    lower_spmd_or_none,
)

__all__ = [
    "SpmdModule",
    "collective_report",
    "emit_spmd",
    "format_collective_report",
    "lower_spmd",
    "lower_spmd_or_none",
]
