"""Run HIR functions on IREE (llvm-cpu): a second StableHLO consumer besides XLA (DESIGN §5).

`run_iree(fn, *arrays)` mirrors `run_xla`: arguments are checked and DimVars bound from their
shapes by the same `check_inputs`, the StableHLO module for those shapes is compiled once per
(function, shapes, dtypes) and cached, and the numpy results are structured like the
function's return type.

IREE is an optional extra (`pip install 'tilefoundry[iree]'`) imported only when first used; a
missing install is an UnsupportedError naming the extra.

Type conversion is pinned explicitly (`IREE_TYPE_FLAGS`) rather than left to IREE's defaults: by
default IREE demotes f64 to f32 at the input boundary, which silently changes the function's
signature (an f64 argument is then refused at run time, an f64 result would come back f32) and
its precision. The program's dtypes are the contract, so every input demotion/promotion is off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tilefoundry.caches import LRU
from tilefoundry.errors import InternalCompilerError, UnsupportedError
from tilefoundry.exits.runtimes.xla import check_inputs, structure
from tilefoundry.ir.hir import Function

IREE_TYPE_FLAGS = (
    "--iree-input-demote-f64-to-f32=false",
    "--iree-input-demote-i64-to-i32=false",
    "--iree-input-demote-f32-to-f16=false",
    "--iree-input-promote-f16-to-f32=false",
    "--iree-input-promote-bf16-to-f32=false",
)
"""Every dtype runs as declared; IREE 3.13 demotes f64 by default (its flag names, checked against
`iree-compile --help-hidden`)."""

_COMPILE_FLAGS = (
    # without a target CPU IREE targets a generic one and warns at length on stderr
    "--iree-llvmcpu-target-cpu=host",
    *IREE_TYPE_FLAGS,
)

_MODULES = LRU("run_iree: compiled modules", 64)
"""(id(fn), portable, argument shapes/dtypes) -> the loaded module, while fn lives."""


def _import_iree():
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise UnsupportedError(
            "run_iree needs IREE: pip install 'tilefoundry[iree]' "
            "(iree-base-compiler and iree-base-runtime)"
        ) from err
    return compiler, runtime


def compile_iree(module: str | bytes) -> Any:
    """A loaded IREE module for StableHLO text or a portable (VHLO) artifact, ready to call as
    `.main(*arrays)`. Our text has already passed jaxlib's verifier, so IREE refusing it is a
    defect to investigate (ours or IREE's), reported with the diagnostics and the text."""
    compiler, runtime = _import_iree()
    try:
        vmfb = compiler.compile_str(
            module,
            target_backends=["llvm-cpu"],
            input_type="stablehlo",
            extra_args=list(_COMPILE_FLAGS),
        )
    except compiler.CompilerToolError as err:
        shown = module if isinstance(module, str) else "<portable artifact>"
        raise InternalCompilerError(
            f"IREE exit: iree-compile rejected the module:\n{err}\n--- module ---\n{shown}"
        ) from None
    return runtime.load_vm_flatbuffer(vmfb, driver="local-task")


def run_iree(fn: Function, *arrays: Any, portable: bool = False) -> Any:
    """Run `fn` on IREE's CPU backend; `portable=True` compiles the VHLO portable artifact (what
    a deployment ships) instead of the text, proving IREE reads that form too."""
    from tilefoundry.exits.stablehlo import emit_stablehlo

    arrays, bindings = check_inputs(fn, arrays, "run_iree")
    key = (id(fn), portable, tuple((a.shape, a.dtype.str) for a in arrays))
    module = _MODULES.hit(key)
    if module is None:
        module = compile_iree(emit_stablehlo(fn, bindings=bindings or None, portable=portable))
        _MODULES.put(key, module, owner=fn)
    outputs = module.main(*arrays)
    if not isinstance(outputs, (tuple, list)):  # IREE returns a lone result unwrapped
        outputs = (outputs,)
    flat = [np.asarray(o.to_host()) for o in outputs]
    return structure(flat, fn.body.type if fn.body is not None else fn.return_type)
