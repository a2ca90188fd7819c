"""Refuse up front, from the types alone, a kernel a GPU backend cannot compile (issue 27).

Runs when a kernel is built for a GPU (compiled, or lowered for `cuda`), after the exit's own
preflight. Every per-CTA value is a tile of a concrete shape, dtype and storage: a gmem block
(each BlockSpec: parameters, results, array constants) and the result of every op call and loop
of the body (loop and fusion bodies included). Each backend states its constraints on them:

- Triton: every BlockSpec block a power of two along each dim (Triton's tensors are) where the
  kernel loads it whole; a parameter that only Ref readers read (`reads_refs` rules: a window,
  a conv tap) is left to `gpu_primitives`, which refuses each load that is not a power of two;
- Mosaic GPU: every block a whole number of warpgroups (a multiple of 128 elements), since its
  copies move warpgroup-sized chunks;
- both: dtypes the backend has arithmetic for; at most 2^31 - 1 CTAs (CUDA's launch limit; Pallas
  folds any number of grid axes into the launch, so the grid's rank itself is free); the shared
  memory of one CTA within the backend's budget, from the smem tiles (times Triton's pipeline
  stages for tiles a loop reloads every trip; Mosaic GPU also stages every block in smem).

A refusal is located at the value and names the constraint and the fix. What only the traced
kernel shows (a primitive the backend has no rule for, a dot smaller than 16) is `gpu_primitives`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import prod

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.pallas.gpu import GpuBackend, Kernel, KernelTiles, MosaicGpu, Triton
from tilefoundry.exits.pallas.grid import EXIT, BlockMap, block_map, fields
from tilefoundry.exits.pallas.preflight import body_nodes
from tilefoundry.ir.core import Call, Expr, Op, Var, source_span
from tilefoundry.ir.hir import Function, FusionRegion, GridRegionExpr
from tilefoundry.ir.types import DType, StorageKind, resolve_dim
from tilefoundry.rules import PALLAS_REF_READERS

MAX_CTAS = 2**31 - 1
WARPGROUP = 128
"""Mosaic GPU's unit: one warpgroup of 128 threads moves a block element per thread."""

SMEM_BUDGET = 99 * 1024
"""Bytes of shared memory one CTA may use: the opt-in maximum of sm_86 / sm_89 (the smallest of
the GPUs since Ampere; an A100 allows 163 KiB, an H100 227 KiB)."""

TRITON_DTYPES = ("bool", "i8", "i16", "i32", "u8", "u16", "u32", "f16", "bf16", "f32", "fp8e4m3")
MOSAIC_DTYPES = ("bool", "i8", "i16", "i32", "u8", "u16", "u32", "f16", "bf16", "f32")
"""The dtypes each backend computes in (64-bit ones are refused for every kernel: jax's 32-bit
default types; i64 values inside a kernel are i32 there). f8e8m0 and f4e2m1 have no arithmetic in
either, fp8e4m3 none in Mosaic GPU's lane lowering."""

_NARROWED = {"i64": "i32", "u64": "u32", "f64": "f32"}


@dataclass(frozen=True)
class Tile:
    """One per-CTA value: what it is (for messages), its node, shape, dtype and storage, and
    whether a loop recomputes it every trip."""

    what: str
    node: Expr
    shape: tuple[int, ...]
    dtype: DType
    storage: StorageKind
    in_loop: bool


def check_gpu(kernel: Kernel, backend: GpuBackend) -> KernelTiles:
    """Raise the first constraint of `backend` the kernel breaks; return what its compiler
    params are derived from."""
    blocks = [*kernel.inputs, *kernel.constant_maps(), *kernel.outputs]
    tiles = _block_tiles(kernel, blocks) + _body_tiles(kernel)
    facts = KernelTiles(
        largest=max((prod(t.shape) for t in tiles), default=1),
        has_loop=any(isinstance(t.node, GridRegionExpr) for t in tiles),
    )
    _check_launch(kernel, backend)
    _check_dtypes(tiles, backend)
    windowed = _read_through_refs(kernel.fn) if isinstance(backend, Triton) else set()
    for tile in tiles[: len(blocks)]:
        if tile.node not in windowed:
            _check_block(tile, backend)
    _check_shared_memory(tiles, blocks, backend, facts)
    return facts


def _block_tiles(kernel: Kernel, blocks: Iterable[BlockMap]) -> list[Tile]:
    fn, gmem = kernel.fn, StorageKind.GMEM
    named = [(f"parameter '{p.name}'", p) for p in fn.params]
    named += [(f"constant {i}", c) for i, c in enumerate(kernel.constants)]
    named += [(f"result {i}", fn.body) for i in range(len(kernel.outputs))]
    return [
        Tile(f"Function {fn.name}: the block of {what}", node, tuple(b.block), b.dtype, gmem, False)
        for b, (what, node) in zip(blocks, named, strict=True)
    ]


def _body_tiles(kernel: Kernel) -> list[Tile]:
    """The per-CTA result of every op call and loop of the body."""
    nodes = list(body_nodes(kernel.fn.body))
    looped = _loop_dependent(nodes)
    tiles = []
    for node in nodes:
        if isinstance(node, Call) and isinstance(node.target, Op):
            what = type(node.target).__name__
        elif isinstance(node, GridRegionExpr):
            what = "GridRegionExpr"
        else:
            continue
        for index, type_ in enumerate(fields(node.type)):
            shape = tuple(resolve_dim(d, kernel.bindings) for d in type_.shape)
            block = block_map(str(index), type_, shape, kernel.mesh, what, node).block
            label = f"{what}: its result" + (f" {index}" if len(fields(node.type)) > 1 else "")
            tiles.append(Tile(label, node, block, type_.dtype, type_.storage, node in looped))
    return tiles


def parameter_refs(fn: Function) -> dict[Expr, Var]:
    """The nodes that are a parameter's Ref in the kernel -> that parameter: the parameters, and
    the inputs of fusion regions called on them (the kernel binds a region's inputs to its
    arguments, Refs included)."""
    bound: dict[Expr, Var] = {p: p for p in fn.params}
    for node in reversed(body_nodes(fn.body)):  # a fusion call after its body: outer ones first
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            inputs = zip(node.target.inputs, node.args, strict=True)
            bound.update((inner, bound[arg]) for inner, arg in inputs if arg in bound)
    return bound


def _read_through_refs(fn: Function) -> set[Var]:
    """The parameters that only Ref readers read (their rules load windows of the block, which
    `gpu_primitives` checks): no other node (a rule that gets its operands loaded, a loop's
    init, a tuple, a call, a region's or the body's result) uses them."""
    bound = parameter_refs(fn)
    loaded = {bound[fn.body]} if fn.body in bound else set()
    for node in body_nodes(fn.body):
        if isinstance(node, Call) and isinstance(node.target, FusionRegion):
            loaded.update(bound[out] for out in node.target.outputs if out in bound)
            continue
        if isinstance(node, Call) and type(node.target) in PALLAS_REF_READERS:
            continue
        loaded.update(bound[operand] for operand in node.block_operands() if operand in bound)
    return set(fn.params) - loaded


def _loop_dependent(nodes: list[Expr]) -> set[Expr]:
    """The nodes that read a loop's induction variable or carries (`nodes` in post-order): what
    a loop recomputes every trip, as opposed to the invariant values it reads."""
    loop_vars: set[Expr] = set()
    for node in nodes:
        if isinstance(node, GridRegionExpr):
            loop_vars.update((node.induction_var, *node.carried_args))
    found: set[Expr] = set()
    for node in nodes:
        if (isinstance(node, Var) and node in loop_vars) or any(
            c in found for c in node.block_operands()
        ):
            found.add(node)
    return found


def _check_launch(kernel: Kernel, backend: GpuBackend) -> None:
    ctas = prod(kernel.grid)
    if ctas > MAX_CTAS:
        raise UnsupportedError(
            f"{EXIT}: the grid {kernel.grid} launches {ctas} CTAs; {backend.label} launches at "
            f"most {MAX_CTAS} (CUDA's limit, into which Pallas folds the grid axes); use larger "
            "blocks (fewer CTAs per mesh axis)",
            location=source_span(kernel.fn.body),
        )


def _check_dtypes(tiles: list[Tile], backend: GpuBackend) -> None:
    allowed = TRITON_DTYPES if isinstance(backend, Triton) else MOSAIC_DTYPES
    for tile in tiles:
        name = _NARROWED.get(tile.dtype.name, tile.dtype.name)
        if name not in allowed:
            raise UnsupportedError(
                f"{tile.what} is {tile.dtype.name}, which {backend.label} has no arithmetic for "
                f"(it takes {', '.join(allowed)}); cast it to bf16 or f32 before the kernel, or "
                "run the kernel in interpret mode",
                location=source_span(tile.node),
            )


def _check_block(tile: Tile, backend: GpuBackend) -> None:
    if isinstance(backend, Triton):
        for axis, extent in enumerate(tile.shape):
            if extent & (extent - 1):
                lower = 1 << (extent.bit_length() - 1)
                raise UnsupportedError(
                    f"{tile.what} is {tile.shape} per CTA: {extent} along axis {axis}; Triton "
                    f"needs power-of-two blocks; use {lower} or {lower * 2} (pad the array, or "
                    "choose the cta mesh so each block is a power of two)",
                    location=source_span(tile.node),
                )
    elif isinstance(backend, MosaicGpu) and prod(tile.shape) % WARPGROUP:
        raise UnsupportedError(
            f"{tile.what} is {tile.shape} per CTA ({prod(tile.shape)} elements); Mosaic GPU "
            f"copies blocks in whole warpgroups and needs a multiple of {WARPGROUP} elements; "
            "use larger blocks (fewer CTAs), or --gpu-backend triton",
            location=source_span(tile.node),
        )


def _check_shared_memory(
    tiles: list[Tile], blocks: list[BlockMap], backend: GpuBackend, facts: KernelTiles
) -> None:
    stages = backend.params(facts)[1] if isinstance(backend, Triton) else 1
    staged = [t for t in tiles if t.storage == StorageKind.SMEM]
    if isinstance(backend, MosaicGpu):
        staged += tiles[: len(blocks)]
    used = sum(prod(t.shape) * _bytes(t.dtype) * (stages if t.in_loop else 1) for t in staged)
    if used > SMEM_BUDGET:
        largest = max(staged, key=lambda t: prod(t.shape) * _bytes(t.dtype))
        raise UnsupportedError(
            f"{EXIT}: one CTA needs {used} bytes of shared memory under {backend.label} "
            f"({len(staged)} smem tiles, the largest {largest.what} {largest.shape}), over the "
            f"{SMEM_BUDGET}-byte budget per CTA; use smaller tiles, or fewer pipeline stages "
            "(Triton(num_stages=1))",
            location=source_span(largest.node),
        )


def _bytes(dtype: DType) -> int:
    return max(1, DType.from_name(_NARROWED.get(dtype.name, dtype.name)).itemsize_bits // 8)
