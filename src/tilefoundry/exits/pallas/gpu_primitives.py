"""Refuse, before lowering, a traced kernel that uses what its GPU backend cannot lower (issue 27).

The kernel is traced once (`make_jaxpr` of the `pallas_call`) with each op call's rule under a
named scope of its own, so every jax primitive is traced back to the call that emitted it. Each
equation, loop bodies included, is checked against the backend's lowering as the pinned jax
(0.10.2) has it: a primitive with a rule in the backend's table, and the conditions those rules
put on their operands —

- Triton: every array of a power-of-two size (Triton's tensors are); a dot of two 2-D tiles
  without batch dims, of signed or float operands, each dim at least 16 (smaller ones lower but
  fail in Triton's PTX compile, jax-ml/jax#20051); concatenate / stack only of two `[..., 1]`
  pieces along the last axis; a forward cumsum; an argmax / argmin over one axis; a split into a
  power-of-two count of equal parts. The rules' GPU forms (`KernelNamespace.gpu`) stay inside
  these: MatMul and Conv2D multiply through `kx.matmul` (a dot only where Triton takes it,
  otherwise a multiply reduced over K), Cumulative scans other than a forward cumsum compare
  every pair of positions, erf is computed from exp; what such a form could not keep in
  registers its rule refuses itself (`kx.check_registers`). No gather, slice, rev, pad,
  dynamic_slice or dynamic_update_slice of a value: the rules write those through `kx` as loads
  of a Ref, splits and stacks, or selections (`KernelNamespace.pick`), whose candidates (the
  result times the extent selected from) `kx.check_registers` bounds the same way.
- Mosaic GPU (its lane lowering): reductions over every axis only; no loop carrying arrays (a
  carry whose register layout changes, as a zeros-initialised accumulator's does, fails in its
  layout inference; refused whole, conservatively).

A refusal names the op, the primitive and why, located at the op's call. The lowering tests
(tests/exits/pallas/test_gpu_lowering.py) hold this to the truth: what it accepts lowers for
`cuda` and what it refuses does not, on every op's samples and every example kernel.
"""

from __future__ import annotations

from functools import partial
from math import prod
from typing import Any

from tilefoundry.errors import UnsupportedError
from tilefoundry.exits.pallas.gpu import (
    SCOPE,
    GpuBackend,
    Kernel,
    MosaicGpu,
)
from tilefoundry.exits.pallas.gpu_preflight import parameter_refs
from tilefoundry.ir.core import Call, source_span

_REDUCTIONS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and", "reduce_or")


def check_primitives(kernel: Kernel, backend: GpuBackend, compiler_params: Any) -> int:
    """Raise the first equation of the traced kernel that `backend` cannot lower; return the
    largest array it computes (elements), which a rule's GPU form may make larger than any
    value of the program (a masked broadcast, a product before its reduction)."""
    import jax

    traced: list = []
    call = kernel.call(interpret=False, compiler_params=compiler_params, traced=traced)
    launch = jax.make_jaxpr(call)(*kernel.input_structs())
    (pallas,) = [e for e in launch.jaxpr.eqns if e.primitive.name == "pallas_call"]
    calls = traced[-1].scoped_calls
    rules, jaxpr = _lowering_rules(backend), pallas.params["jaxpr"]
    if isinstance(backend, MosaicGpu):
        reason = partial(_mosaic_reason, rules=rules)
    else:
        blocks, odd_reads = _block_names(kernel, jaxpr), partial(_odd_reads, kernel, calls)
        reason = partial(_triton_reason, rules=rules, blocks=blocks, odd_reads=odd_reads)
    found = _first_refusal(jaxpr, reason)
    if found is not None:
        _refuse(kernel, backend, *found, calls)
    return _largest_array(jaxpr)


def _block_names(kernel: Kernel, jaxpr) -> dict:
    """The kernel's Refs (its jaxpr's inputs: the parameters, constants and results, in the
    launch's order) -> the block each holds, for messages."""
    names = [f"parameter '{p.name}'" for p in kernel.fn.params]
    names += [f"constant {i}" for i in range(len(kernel.constants))]
    names += [f"result {i}" for i in range(len(kernel.outputs))]
    return dict(zip(jaxpr.invars, names, strict=True))


def _odd_reads(kernel: Kernel, calls: list[Call], stacks: tuple[str, ...]) -> list[tuple]:
    """(parameter, its block) of each parameter whose block is no power of two that the op call
    emitting an equation reads (a Ref reader: the preflight refuses any other reader)."""
    call = _emitting_call(stacks, calls)
    if call is None:
        return []
    refs = parameter_refs(kernel.fn)
    index = {p: i for i, p in enumerate(kernel.fn.params)}
    read = [refs[a] for a in call.args if a in refs]
    blocks = [(p, tuple(kernel.inputs[index[p]].block)) for p in dict.fromkeys(read)]
    return [(p, b) for p, b in blocks if any(e & (e - 1) for e in b)]


def _largest_array(jaxpr) -> int:
    """The most elements of any array an equation of `jaxpr` (loop bodies included) computes."""
    from jax.extend.core import jaxprs_in_params

    largest = 1
    for eqn in jaxpr.eqns:
        for inner in jaxprs_in_params(eqn.params):
            largest = max(largest, _largest_array(getattr(inner, "jaxpr", inner)))
        for shape, _ in _shapes(eqn):
            largest = max(largest, prod(shape))
    return largest


def _first_refusal(jaxpr, reason, outer: tuple = ()) -> tuple[tuple, Any] | None:
    """The first equation `reason` refuses, as (the name stacks from it out to the kernel, why):
    a loop's body before the loop itself (the op inside is what the user wrote). A jaxpr nested
    in an equation (a loop body, a jitted jnp function) names its scopes relative to it, so the
    enclosing equations' stacks come along."""
    from jax.extend.core import jaxprs_in_params

    for eqn in jaxpr.eqns:
        stacks = (str(eqn.source_info.name_stack), *outer)
        for inner in jaxprs_in_params(eqn.params):
            found = _first_refusal(getattr(inner, "jaxpr", inner), reason, stacks)
            if found is not None:
                return found
        why = reason(eqn, stacks)
        if why:
            return stacks, why
    return None


def _lowering_rules(backend: GpuBackend) -> Any:
    """The backend's primitive -> rule table in the pinned jax (private: jax is pinned exactly,
    and the lowering tests fail if the table moves)."""
    if isinstance(backend, MosaicGpu):
        try:
            from jax._src.pallas.mosaic_gpu import core as gpu_core
            from jax._src.pallas.mosaic_gpu import lowering
        except ImportError as err:
            raise UnsupportedError(
                f"Mosaic GPU: jax's Mosaic GPU lowering does not import here ({err}); "
                "install absl-py (pip install -e '.[gpu-lowering]'), or use --gpu-backend triton"
            ) from None
        return lowering.mosaic_lowering_rules[gpu_core.LANExWG_SEMANTICS]
    from jax._src.pallas.triton.lowering import triton_lowering_rules

    return triton_lowering_rules


def _shapes(eqn) -> list[tuple[tuple[int, ...], Any]]:
    return [
        (tuple(v.aval.shape), v.aval.dtype)
        for v in (*eqn.invars, *eqn.outvars)
        if hasattr(v.aval, "shape")
    ]


def _triton_reason(
    eqn, stacks: tuple[str, ...], *, rules, blocks: dict, odd_reads
) -> tuple[str, str | None] | None:
    name, params = eqn.primitive.name, eqn.params
    if eqn.primitive not in rules:
        return f"`{name}` (it has no rule for it)", None
    arrays = _array_shapes(eqn)
    for shape in arrays:
        size = prod(shape)
        if size & (size - 1):
            return _odd_array(eqn, shape, blocks, odd_reads(stacks))
    ins = [v.aval for v in eqn.invars]
    if name == "dot_general":
        return _triton_dot(ins, params)
    if name == "concatenate" and (
        len(ins) != 2 or params["dimension"] != ins[0].ndim - 1 or ins[0].shape[-1] != 1
    ):
        return "`concatenate` but of two [..., 1] pieces along the last axis", None
    if name == "stack" and (len(ins) != 2 or params["axis"] != ins[0].ndim):
        return "`stack` but of two pieces along a new last axis", None
    if name == "cumsum" and params["reverse"]:
        return "a reverse `cumsum`", None
    if name in ("argmax", "argmin") and len(params["axes"]) != 1:
        return f"`{name}` over several axes", None
    if name == "split":
        sizes = params["sizes"]
        if len(set(sizes)) != 1 or len(sizes) & (len(sizes) - 1):
            return "`split` into unequal parts, or into a count that is not a power of two", None
    return None


def _array_shapes(eqn) -> list[tuple[int, ...]]:
    """The shapes of an equation's arrays, not of the Refs it reads or writes (a load's source,
    a store's target): a Ref is gmem, not a Triton array; only what is loaded must be a power of
    two."""
    values = (*eqn.invars, *eqn.outvars)
    return [
        tuple(v.aval.shape)
        for v in values
        if hasattr(v.aval, "shape") and not hasattr(v.aval, "inner_aval")
    ]


def _odd_array(eqn, shape: tuple[int, ...], blocks: dict, odd_reads: list) -> tuple[str, str]:
    """Why an array that is not a power of two is refused, and the fix. Where it comes from a
    block that is no power of two (read only by Ref readers, so left here by the preflight): a
    load of the block's Ref, or an op that reads such a block (a gather-load's positions), what
    the preflight says of a block, naming it."""
    name = eqn.primitive.name
    source = blocks.get(eqn.invars[0]) if name in ("get", "load") else None
    if source is not None:
        what, odd = f"a load of the block of {source} as a {shape} array", shape
    elif odd_reads:
        param, odd = odd_reads[0]
        source = f"parameter '{param.name}'"
        what = f"`{name}` of a {shape} array, reading the block of {source}, {odd} per CTA"
    else:
        return (
            f"`{name}` of a {shape} array (Triton's arrays have power-of-two sizes)",
            "pad the value to a power-of-two shape, or choose tiles that are",
        )
    axis, extent = next((a, e) for a, e in enumerate(odd) if e & (e - 1))
    lower = 1 << (extent.bit_length() - 1)
    return (
        f"{what} ({extent} along axis {axis}; Triton needs power-of-two blocks, as its arrays "
        f"are: use {lower} or {lower * 2})",
        f"read {source} in power-of-two windows (a slice, or a convolution's taps one at a "
        "time, as Conv2D reads its weights), or pad it to a power-of-two shape",
    )


def _triton_dot(ins, params) -> tuple[str, str | None] | None:
    """MatMul's and Conv2D's GPU forms emit only dots that pass (`kx.matmul`); this holds any
    other emitter of a `dot_general` to what Triton takes."""
    _, batch = params["dimension_numbers"]
    if batch != ((), ()) or any(a.ndim != 2 for a in ins):
        shapes = " x ".join(str(tuple(a.shape)) for a in ins)
        return (
            f"a `dot_general` of {shapes} (its dot takes two 2-D tiles, no batch dims)",
            "give each CTA a 2-D matmul (the batch dims over the cta mesh, reshaped away), or "
            "run batched matmuls on XLA",
        )
    for aval in ins:
        if aval.dtype.kind == "u":
            return (
                f"a `dot_general` of {aval.dtype} operands (its dot reads integers as signed)",
                "cast them to a signed type first",
            )
        if min(aval.shape) < 16:
            return (
                f"a `dot_general` of a {tuple(aval.shape)} tile (its dot needs at least 16 along "
                "each dim, jax-ml/jax#20051)",
                "use tiles of 16 or more along every dim of a matmul",
            )
    return None


def _mosaic_reason(eqn, stacks: tuple[str, ...], *, rules) -> tuple[str, str | None] | None:
    name = eqn.primitive.name
    if eqn.primitive not in rules:
        return f"`{name}` (its lane lowering has no rule for it)", None
    if name in _REDUCTIONS:
        rank = eqn.invars[0].aval.ndim
        if set(eqn.params["axes"]) != set(range(rank)):
            return f"a `{name}` over some axes only (it reduces every axis or none)", None
    if name in ("scan", "while") and any(v.aval.ndim for v in eqn.outvars):
        return (
            f"a `{name}` loop carrying arrays (its carries must keep the register layout it "
            "infers, which a tile loop's accumulators do not)",
            None,
        )
    return None


def _refuse(kernel: Kernel, backend: GpuBackend, stacks, why, calls: list[Call]):
    """`why`: (what the backend cannot lower, the fix, or None for the general one)."""
    what, fix = why
    call = _emitting_call(stacks, calls)
    where = type(call.target).__name__ if call is not None else f"Function {kernel.fn.name}"
    node = call if call is not None else kernel.fn.body
    other = "triton" if isinstance(backend, MosaicGpu) else "mosaic"
    fix = fix or f"run it in interpret mode or on XLA (run_xla), or try --gpu-backend {other}"
    raise UnsupportedError(
        f"{where}: {backend.label} cannot lower {what} (Pallas, jax 0.10.2); {fix}",
        location=source_span(node),
    )


def _emitting_call(stacks: tuple[str, ...], calls: list[Call]) -> Call | None:
    """The op call whose rule emitted an equation: the innermost of our scopes on its name
    stacks (innermost first)."""
    for stack in stacks:
        for part in reversed(stack.split("/")):
            if part.startswith(SCOPE):
                return calls[int(part[len(SCOPE) :])]
    return None
