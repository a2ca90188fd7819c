"""The Pallas exit: a program on a `cta` mesh becomes one `pallas_call` (DESIGN §2, §4.13).

grid.py fixes the launch (grid = the cta mesh, one BlockSpec per gmem value), kernel.py traces
the per-CTA body through each op's PALLAS rule, run.py builds and runs the call. jax is imported
only when a kernel is built, so importing this package costs nothing.
"""

from tilefoundry.exits.pallas.run import PallasKernel, lower_pallas, run_pallas

__all__ = ["PallasKernel", "lower_pallas", "run_pallas"]
