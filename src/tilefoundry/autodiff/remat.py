"""`checkpoint(fn)`: the backward recomputes fn's forward instead of keeping its intermediates
(activation rematerialisation, issue 26 item 4; JAX's `jax.checkpoint` is the anchor).

Differentiating through a call of a plain @func inlines its body into the forward program, so
every intermediate a VJP rule reads stays alive from the forward until the backward reaches it:
a decoder keeps every layer's activations at the peak. A call of `checkpoint(fn)` stays a call
in the forward (its intermediates die when it returns: only its arguments and result live on),
and when the reverse walk reaches it, fn's body is inlined there, from the same arguments, and
differentiated: the backward recomputes the forward of fn once, and its intermediates live only
while that call site's backward runs. The values are the same computation on the same operands,
so the gradient is bit-equal to the non-remat one; `footprint.peak_memory` shows the saving.
Inside a loop body the same holds per iteration: the loop then stacks only the call's arguments
(the carries), as `jax.checkpoint` around a scan's body does.

The mark is metadata on the Function (it changes no value the program computes), and the
checkpointed Function is named `checkpoint_<name>`, so `show` says which calls are recomputed
and a cache keyed by Function (elaboration) never confuses it with the unmarked one.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilefoundry.errors import VerifyError
from tilefoundry.frontend.transforms import function_transform
from tilefoundry.ir.core import Metadata, get_metadata, source_span
from tilefoundry.ir.hir import Function


@dataclass(frozen=True)
class Rematerialized(Metadata):
    """On a Function: reverse mode recomputes its body at each call site it differentiates."""


@function_transform
def checkpoint(fn: Function) -> Function:
    """`fn`, marked so that reverse mode recomputes it where it differentiates a call of it."""
    if not isinstance(fn, Function):
        raise VerifyError(f"checkpoint: marks a @func Function, got {fn!r}")
    if is_checkpointed(fn):
        return fn
    if fn.body is None:
        raise VerifyError(
            f"checkpoint: Function {fn.name} is a dispatch prototype; checkpoint one of its "
            "variants (the mark is on the body that is recomputed)",
            location=source_span(fn),
        )
    return Function(
        f"checkpoint_{fn.name}", fn.params, fn.body, fn.return_type,
        specializations=fn.specializations, label=fn.label,
        metadata=(*fn.metadata, Rematerialized()),
    )  # fmt: skip


def is_checkpointed(fn: Function) -> bool:
    return get_metadata(fn, Rematerialized) is not None
