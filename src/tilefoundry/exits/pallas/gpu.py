"""The GPU lowering of a compiled tile kernel: Triton or Mosaic GPU, always chosen by the exit.

jax 0.10.2 sends a `pallas_call` without compiler params to Mosaic GPU (`jax_pallas_use_mosaic_gpu`
defaults to True), whose `pallas_call` path lowers neither a matmul (`dot_general`) nor a
reduction along an axis, so a kernel left to jax's default would fail at lowering. The exit
therefore names its backend in the call's compiler params: **Triton** by default
(`pltriton.CompilerParams(num_warps, num_stages)`), **Mosaic GPU** where it serves (elementwise
kernels over blocks of whole warpgroups; JAX 0.11 moves Pallas to it, so the backend is a choice
and not a constant). Interpret mode (the default without a GPU) takes no compiler params.

What each backend cannot lower is refused before lowering: the constraints that follow from the
types (block shapes, dot sizes, dtypes, the launch, shared memory) in `gpu_preflight`, the jax
primitives a backend has no rule for in `gpu_primitives`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tilefoundry.errors import UnsupportedError

SCOPE = "tilefoundry_call"
"""The named-scope prefix of an op call's rule inside the kernel (`KernelBody`): call i's rule
runs under `SCOPE + str(i)`, so the GPU checks trace each jax primitive back to its call."""

GPU_REGISTER_ELEMENTS = 2**14
"""The largest intermediate (elements) a GPU form of an op builds (a masked broadcast, a product
before its reduction, a selection's candidates): a quarter of an SM's 65,536 32-bit registers
(sm_50 through sm_90), 64 per thread at 8 warps, which leaves the rest of the register file (at
most 255 registers a thread) to the operands, the accumulator and the rest of the kernel. Triton
spreads a tensor over the CTA's threads, one 32-bit element per register; above the bound it
would spill to local memory, so the form is refused, not spilled."""

Kernel = Any
"""What the GPU checks read: a `run.PallasKernel` (named, not imported: run.py imports the
checks)."""

GPU_BACKENDS = ("triton", "mosaic")
"""The names `run_pallas(..., gpu_backend=)` and `run --gpu-backend` take."""

TRITON_MAX_WARPS = 32
"""1024 threads: the most one CUDA thread block (one CTA) may have."""


@dataclass(frozen=True)
class KernelTiles:
    """What the compiler params are derived from: the largest per-CTA value (elements; the
    largest array of the traced kernel where a rule's GPU form builds a larger one) and whether
    the kernel has a tile loop (whose window reads Triton can software-pipeline)."""

    largest: int
    has_loop: bool


@dataclass(frozen=True)
class Triton:
    """Pallas -> Triton IR, one `__gpu$xla.gpu.triton` custom call. `num_warps` / `num_stages`
    left None are derived from the kernel's tiles (`params`)."""

    num_warps: int | None = None
    num_stages: int | None = None
    name: ClassVar[str] = "triton"
    label: ClassVar[str] = "Triton"
    custom_call: ClassVar[str] = "__gpu$xla.gpu.triton"

    def __post_init__(self) -> None:
        warps = self.num_warps
        if warps is not None and (warps < 1 or warps > TRITON_MAX_WARPS or warps & (warps - 1)):
            raise UnsupportedError(
                f"Triton: num_warps={warps} must be a power of two from 1 to {TRITON_MAX_WARPS} "
                "(a CTA has at most 1024 threads); use 4 or 8"
            )
        if self.num_stages is not None and self.num_stages < 1:
            raise UnsupportedError(
                f"Triton: num_stages={self.num_stages} must be at least 1; use 1 (no pipelining) "
                "or 2"
            )

    def params(self, tiles: KernelTiles) -> tuple[int, int]:
        """(num_warps, num_stages). Derived: one warp per 256 elements of the largest tile, 1 to
        8 (the rule of jax's own Pallas GPU layer norm), and 2 stages (double-buffered window
        reads) when the kernel has a tile loop to pipeline, else 1."""
        warps = self.num_warps
        if warps is None:
            warps = 1 << (min(max(tiles.largest // 256, 1), 8).bit_length() - 1)
        stages = self.num_stages
        if stages is None:
            stages = 2 if tiles.has_loop else 1
        return warps, stages

    def compiler_params(self, tiles: KernelTiles) -> Any:
        from jax.experimental.pallas import triton as pltriton

        warps, stages = self.params(tiles)
        return pltriton.CompilerParams(num_warps=warps, num_stages=stages)

    def describe(self, tiles: KernelTiles) -> str:
        warps, stages = self.params(tiles)
        return f"{self.label} (num_warps={warps}, num_stages={stages})"


@dataclass(frozen=True)
class MosaicGpu:
    """Pallas -> Mosaic GPU (lane semantics), one `mosaic_gpu_v2` custom call."""

    name: ClassVar[str] = "mosaic"
    label: ClassVar[str] = "Mosaic GPU"
    custom_call: ClassVar[str] = "mosaic_gpu_v2"

    def compiler_params(self, tiles: KernelTiles) -> Any:
        from jax.experimental.pallas import mosaic_gpu as plgpu

        return plgpu.CompilerParams()

    def describe(self, tiles: KernelTiles) -> str:
        return self.label


GpuBackend = Triton | MosaicGpu


def gpu_backend(choice: str | GpuBackend | None) -> GpuBackend:
    """The backend named by `choice` (None: Triton, with derived params)."""
    if choice is None or choice == "triton":
        return Triton()
    if choice == "mosaic":
        return MosaicGpu()
    if isinstance(choice, Triton | MosaicGpu):
        return choice
    raise UnsupportedError(
        f"run_pallas: gpu_backend={choice!r} is not one of {', '.join(GPU_BACKENDS)}; pass a "
        "name, or Triton(num_warps=..., num_stages=...)"
    )
