"""Build and run the one `pallas_call` of a tile program (DESIGN §3 `run_pallas`).

`run_pallas(fn, *arrays, interpret=None, gpu_backend=None)` checks the arguments exactly as
`evaluate` does (count, dtype, DimVar binding), builds the kernel for those shapes, runs it
(interpret mode on CPU; where jax's default backend is a GPU, the kernel compiled through the
chosen GPU backend, `gpu.py`) and returns numpy arrays shaped like the function's return (a tuple
return gives a tuple). `lower_for_cuda` lowers the compiled kernel for `cuda` on any machine.
`PallasKernel.summary` is what `tilefoundry emit --pallas` prints first: the grid and BlockSpecs
(golden-tested), then the jaxpr.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tilefoundry.analysis import TypeInferContext
from tilefoundry.caches import LRU
from tilefoundry.errors import EvalError, UnsupportedError
from tilefoundry.exits.pallas.gpu import GpuBackend
from tilefoundry.exits.pallas.gpu import gpu_backend as resolve_backend
from tilefoundry.exits.pallas.grid import EXIT, BlockMap, block_map, fields, find_grid
from tilefoundry.exits.pallas.kernel import KernelBody
from tilefoundry.exits.pallas.namespace import KernelNamespace, KernelRef
from tilefoundry.exits.pallas.preflight import array_constants, preflight
from tilefoundry.ir.core import Constant, source_span
from tilefoundry.ir.core.nested import flatten, regroup
from tilefoundry.ir.hir import Function, select_variant
from tilefoundry.ir.hir.signature import check_arguments
from tilefoundry.ir.types import TupleType, resolve_dim
from tilefoundry.ir.types.shard import Mesh

_WIDE = ("f64", "i64", "u64")
"""Pallas kernels compute with jax's default 32-bit types; a 64-bit gmem value would be narrowed."""


@dataclass(frozen=True)
class PallasKernel:
    """The launch of one tile program for concrete argument shapes."""

    fn: Function
    mesh: Mesh | None
    grid: tuple[int, ...]
    inputs: tuple[BlockMap, ...]
    outputs: tuple[BlockMap, ...]
    bindings: dict
    constants: tuple[Constant, ...] = ()
    """Array constants of the body, passed after the parameters as whole-array inputs."""

    def summary(self) -> str:
        """The grid and every BlockSpec, one line each (stable text, golden-tested)."""
        mesh = self.mesh
        where = "one program (no cta mesh)"
        if mesh is not None:
            axes = ", ".join(
                f"{mesh.names[a] if mesh.names else a}={e}" for a, e in enumerate(mesh.shape)
            )
            where = f"cta mesh [{axes}]"
        lines = [f"pallas_call @{self.fn.name}", f"  grid ({_dims(self.grid)}) over {where}"]
        lines += [f"  in  {b.describe(mesh)}" for b in (*self.inputs, *self.constant_maps())]
        lines += [f"  out {b.describe(mesh)}" for b in self.outputs]
        return "\n".join(lines) + "\n"

    def call(
        self,
        interpret: bool,
        compiler_params: Any = None,
        traced: list | None = None,
        gpu: bool | None = None,
    ):
        """The `pallas_call` (a jax-traceable function of the global arrays). A compiled call
        takes its GPU backend's `compiler_params` (`gpu_call`); `traced`, when given, collects
        the KernelBody of each trace (whose scopes name the op calls). `gpu` (by default: not
        interpreted) traces the rules' GPU forms (`KernelNamespace.gpu`)."""
        import jax
        from jax.experimental import pallas as pl

        kx = KernelNamespace(gpu=not interpret if gpu is None else gpu)
        mesh_shape = tuple(self.mesh.shape) if self.mesh is not None else ()
        n_in = len(self.inputs) + len(self.constants)
        n_params = len(self.inputs)
        tupled = isinstance(self.fn.body.type, TupleType)

        def kernel(*refs):
            constants = {
                c: KernelRef(r) for c, r in zip(self.constants, refs[n_params:n_in], strict=True)
            }
            body = KernelBody(self.fn, self.bindings, self.mesh, kx, constants)
            if traced is not None:
                traced.append(body)
            result = body.run([KernelRef(r) for r in refs[:n_params]])
            results = flatten(result) if tupled else [result]
            for ref, value in zip(refs[n_in:], results, strict=True):
                ref[...] = kx.load(value).astype(ref.dtype)

        def spec(b: BlockMap):
            return pl.BlockSpec(b.block, b.index_map(mesh_shape))

        out_shape = [jax.ShapeDtypeStruct(b.shape, b.dtype.to_numpy()) for b in self.outputs]
        return pl.pallas_call(
            kernel,
            grid=self.grid,
            in_specs=[spec(b) for b in (*self.inputs, *self.constant_maps())],
            out_specs=[spec(b) for b in self.outputs],
            out_shape=out_shape,
            interpret=interpret,
            compiler_params=None if interpret else compiler_params,
            name=self.fn.name,
        )

    def gpu_call(self, backend: GpuBackend) -> Any:
        """The compiled call for `backend`, after refusing up front whatever the backend cannot
        lower: the constraints of the types (`gpu_preflight`), then those of the traced kernel
        (`gpu_primitives`)."""
        from tilefoundry.exits.pallas.gpu_preflight import check_gpu
        from tilefoundry.exits.pallas.gpu_primitives import check_primitives

        tiles = check_gpu(self, backend)
        traced = check_primitives(self, backend, backend.compiler_params(tiles))
        params = backend.compiler_params(replace(tiles, largest=max(tiles.largest, traced)))
        return self.call(interpret=False, compiler_params=params)

    def input_structs(self) -> list:
        """`jax.ShapeDtypeStruct`s of the call's inputs: the parameters, then the constants."""
        import jax

        maps = (*self.inputs, *self.constant_maps())
        return [jax.ShapeDtypeStruct(b.shape, b.dtype.to_numpy()) for b in maps]

    def constant_maps(self) -> tuple[BlockMap, ...]:
        return tuple(
            BlockMap(
                f"constant {i}",
                np.shape(c.value),
                c.type.dtype,
                np.shape(c.value),
                ((),) * np.ndim(c.value),
            )
            for i, c in enumerate(self.constants)
        )

    def constant_arrays(self) -> list[np.ndarray]:
        return [np.asarray(c.value, c.type.dtype.to_numpy()) for c in self.constants]

    def jaxpr(self) -> str:
        """The traced kernel launch (interpret-independent), for `emit --pallas`."""
        import jax

        return str(jax.make_jaxpr(self.call(interpret=True))(*self.input_structs()))


def _dims(shape: Sequence[int]) -> str:
    return ", ".join(str(e) for e in shape) + ("," if len(shape) == 1 else "")


def _concrete(shape, bindings) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else resolve_dim(d, bindings) for d in shape)


def lower_pallas(fn: Function, *arrays: Any, caller: str = "run_pallas") -> PallasKernel:
    """The kernel of `fn` for these arguments (checked as `evaluate` checks them)."""
    if not isinstance(fn, Function):
        raise EvalError(f"{caller}: expected a hir Function, got {type(fn).__name__}")
    checked, bindings = check_arguments(fn.name, fn.params, arrays, caller)
    if fn.is_dispatch_base:
        fn = select_variant(fn, bindings={var.name: n for var, n in bindings.items()})
    TypeInferContext().infer(fn)
    mesh = find_grid(fn)
    inputs = []
    for param, array in zip(fn.params, checked, strict=True):
        where = f"Function {fn.name}: parameter '{param.name}'"
        _refuse_wide(param.type.dtype, where, param)
        inputs.append(block_map(param.name, param.type, array.shape, mesh, where, param))
    preflight(fn)  # after the parameters (a Partial one is refused there), before the results
    constants = array_constants(fn)
    outputs = []
    for index, type_ in enumerate(fields(fn.body.type)):
        where = f"Function {fn.name}: result {index}"
        _refuse_wide(type_.dtype, where, fn.body)
        shape = _concrete(type_.shape, bindings)
        outputs.append(block_map(str(index), type_, shape, mesh, where, fn.body))
    grid = tuple(mesh.shape) if mesh is not None else ()
    return PallasKernel(fn, mesh, grid, tuple(inputs), tuple(outputs), bindings, constants)


def _refuse_wide(dtype, where: str, node) -> None:
    if dtype.name in _WIDE:
        raise UnsupportedError(
            f"{where}: is {dtype.name}; {EXIT} computes with jax's 32-bit default types and "
            "would narrow it silently; cast it to a 32-bit dtype first",
            location=source_span(node),
        )


def default_interpret() -> bool:
    """Interpret (CPU) unless jax's default backend is a GPU, where the kernel compiles."""
    import jax

    return jax.default_backend() != "gpu"


_CALLS = LRU("run_pallas: traced kernels", 64)
"""(id(fn), argument shapes/dtypes, interpret, GPU backend) -> (kernel, jitted call), while fn
lives: a kernel is traced once per shape, as run_xla compiles once per shape. (The kernel refers
to fn, so an entry keeps its function until the bound drops it.)"""


def run_pallas(
    fn: Function,
    *arrays: Any,
    interpret: bool | None = None,
    gpu_backend: str | GpuBackend | None = None,
) -> Any:
    """Run `fn` as one Pallas kernel on global arrays; numpy results like `evaluate`'s.

    `interpret=None` interprets unless jax's default backend is a GPU. A compiled kernel goes
    through `gpu_backend` ("triton", the default, or "mosaic", or a `Triton(num_warps=...,
    num_stages=...)`), which refuses up front what it cannot lower; naming a backend while
    interpreting checks its constraints too, so a CPU run says what a GPU would refuse."""
    kernel = lower_pallas(fn, *arrays)  # checks the inputs on every call, cached or not
    interpret = default_interpret() if interpret is None else interpret
    if not interpret and default_interpret():
        import jax

        raise UnsupportedError(
            f"run_pallas: a compiled Pallas kernel needs a GPU (Triton / Mosaic GPU), but jax's "
            f"default backend is {jax.default_backend()!r}; pass interpret=True (or None) here"
        )
    backend = None if interpret and gpu_backend is None else resolve_backend(gpu_backend)
    checked = [np.asarray(a) for a in arrays]
    key = (id(fn), tuple((a.shape, a.dtype.str) for a in checked), interpret, backend)
    entry = _CALLS.hit(key)
    if entry is None:
        import jax

        compiled = kernel.gpu_call(backend) if backend is not None else None  # refusals
        call = kernel.call(interpret=True, gpu=backend is not None) if interpret else compiled
        entry = _CALLS.put(key, (kernel, jax.jit(call)), owner=fn)
    kernel, call = entry
    outputs = [np.asarray(o) for o in call(*checked, *kernel.constant_arrays())]
    return regroup(iter(outputs), kernel.fn.body.type)


def lower_for_cuda(fn: Function, *arrays: Any, gpu_backend: str | GpuBackend | None = None) -> str:
    """The StableHLO a GPU machine would compile for `fn`'s kernel on these arguments (their
    shapes and dtypes; the values are not read), lowered for `cuda` on any machine: the check
    of the GPU path that needs no GPU. Refused up front like a compiled `run_pallas`."""
    import jax

    kernel = lower_pallas(fn, *arrays, caller="lower_for_cuda")
    call = kernel.gpu_call(resolve_backend(gpu_backend))
    lowered = jax.jit(call).trace(*kernel.input_structs()).lower(lowering_platforms=("cuda",))
    return lowered.as_text()
