"""The Pallas exit: a program on a `cta` mesh becomes one `pallas_call` (DESIGN §2, §4.13).

grid.py fixes the launch (grid = the cta mesh, one BlockSpec per gmem value), kernel.py traces
the per-CTA body through each op's PALLAS rule, run.py builds and runs the call; gpu.py chooses
the GPU lowering (Triton or Mosaic GPU) of a compiled kernel and gpu_preflight.py /
gpu_primitives.py refuse up front what that backend cannot lower. jax is imported
only when a kernel is built, so importing this package costs nothing.
"""

from tilefoundry.exits.pallas.gpu import GPU_BACKENDS, MosaicGpu, Triton
from tilefoundry.exits.pallas.run import PallasKernel, lower_for_cuda, lower_pallas, run_pallas

__all__ = [
    "GPU_BACKENDS",
    "MosaicGpu",
    "PallasKernel",
    "Triton",
    "lower_for_cuda",
    "lower_pallas",
    "run_pallas",
]
