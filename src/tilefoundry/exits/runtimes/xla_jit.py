"""Calling our StableHLO through `jax.jit`'s C++ argument path.

`executable.execute(jax.device_put(list))` costs ~10x `jax.jit` per call on a small program: no
Python `device_put` is fast, only jit's C++ dispatch is. So the module is wrapped as a
`jax.export.Exported` (in/out avals read off the module's `main`, the portable artifact as
`mlir_module_serialized`, calling convention 10) and called through a cached
`jax.jit(exported.call)`: numpy in, device arrays out, the same optimised HLO as compiling the text.

The `Exported` declares the platform of the devices it runs on (jax's default backend: `cpu`,
`cuda`, ...), since jax refuses to call one on a platform it does not name; `platforms` names
others (a module to lower for `cuda` on a CPU machine, or several for `emit --portable
--platform`). Our modules have nothing platform-specific, so several platforms share one module,
which then takes the platform index jax passes first and ignores it (`_with_platform_index`).

The `Exported` constructor and `_module_to_bytecode` are jax internals; jax is pinned (0.10.2) and
tests/exits/test_xla_jit.py fails loudly if either changes shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from tilefoundry.caches import memoize

_CANDIDATE_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn",
    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "float8_e4m3",
    "float8_e3m4", "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int2",
    "uint2", "int4", "uint4",
)  # fmt: skip


_X64_DTYPES = tuple(np.dtype(d) for d in ("int64", "uint64", "float64", "complex128"))
"""What jax narrows to 32 bits unless x64 is on."""


@memoize("xla_jit: MLIR element types", 1)
def _ir_dtypes() -> dict[str, np.dtype]:
    """MLIR element type spelling -> numpy dtype, from jax's own mapping."""
    import ml_dtypes
    from jax._src.interpreters import mlir

    found: dict[str, np.dtype] = {}
    with mlir.make_ir_context():
        for name in _CANDIDATE_DTYPES:
            try:
                dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
                found.setdefault(str(mlir.dtype_to_ir_type(dtype)), dtype)
            except (TypeError, KeyError, AttributeError):
                continue
    return found


def _main_avals(module: Any) -> tuple[list, list]:
    """(argument avals, result avals) of the module's public `main`."""
    from jax._src import core
    from jax._src.lib.mlir import ir

    dtypes = _ir_dtypes()
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == (
            "main"
        ):
            kind = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)

            def aval(t: Any) -> Any:
                tensor = ir.RankedTensorType(t)
                dtype = dtypes.get(str(tensor.element_type))
                if dtype is None:
                    raise LookupError(f"no jax dtype for element type {tensor.element_type}")
                return core.ShapedArray(tuple(tensor.shape), dtype)

            return [aval(t) for t in kind.inputs], [aval(t) for t in kind.results]
    raise LookupError("the module has no main function")


def export_platforms(platforms: Sequence[str] | None = None) -> tuple[str, ...]:
    """The platforms an `Exported` declares: `platforms`, else the one jax's devices are on."""
    from jax import export

    return tuple(platforms) if platforms else (export.default_export_platform(),)


def exported_module(
    text: str, *, num_devices: int = 1, platforms: Sequence[str] | None = None
) -> Any:
    """A `jax.export.Exported` for our StableHLO text (one device unless `num_devices`), for
    `export_platforms(platforms)`; a LookupError when a dtype of `main` has no jax counterpart."""
    import jax
    from jax import export
    from jax._src.export._export import _module_to_bytecode
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    platforms = export_platforms(platforms)
    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        in_avals, out_avals = _main_avals(module)
        if len(platforms) > 1:
            module = ir.Module.parse(_with_platform_index(text, module))
        serialized = _module_to_bytecode(module)
    tree = jax.tree_util.tree_structure
    nothing = (None,) * len(in_avals), (None,) * len(out_avals)

    def no_vjp(*_: Any) -> Any:
        raise NotImplementedError("tilefoundry modules are not differentiated through jax")

    return export.Exported(
        fun_name="main",
        in_tree=tree((tuple(0 for _ in in_avals), {})),
        in_avals=tuple(in_avals),
        out_tree=tree(tuple(0 for _ in out_avals)),
        out_avals=tuple(out_avals),
        _has_named_shardings=True,
        _in_named_shardings=nothing[0],
        _out_named_shardings=nothing[1],
        in_shardings_hlo=nothing[0],
        out_shardings_hlo=nothing[1],
        nr_devices=num_devices,
        platforms=platforms,
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=serialized,
        calling_convention_version=10,
        module_kept_var_idx=tuple(range(len(in_avals))),  # the arrays, after any platform index
        uses_global_constants=False,
        _get_vjp=no_vjp,
    )


def _with_platform_index(text: str, module: Any) -> str:
    """The module with `main` renamed and a new public `main` that takes jax's platform index
    (a leading i32 scalar, jax's convention for a module exported for several platforms) before
    the arrays and calls the old one with the arrays."""
    from jax._src.lib.mlir import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == (
            "main"
        ):
            kind = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    ins, outs = [str(t) for t in kind.inputs], [str(t) for t in kind.results]
    args = ", ".join(f"%arg{i}" for i in range(len(ins)))
    call = f"func.call @{_RENAMED_MAIN}({args}) : ({', '.join(ins)}) -> ({', '.join(outs)})"
    returned = ", ".join(f"%0#{i}" for i in range(len(outs))) if len(outs) > 1 else "%0"
    signature = ", ".join(
        ["%platform_index: tensor<i32>"] + [f"%arg{i}: {t}" for i, t in enumerate(ins)]
    )
    wrapper = (
        f"  func.func public @main({signature}) -> ({', '.join(outs)}) {{\n"
        f"    %0{f':{len(outs)}' if len(outs) > 1 else ''} = {call}\n"
        f"    return {returned} : {', '.join(outs)}\n  }}\n"
    )
    renamed = text.replace("func.func public @main(", f"func.func private @{_RENAMED_MAIN}(", 1)
    return renamed[: renamed.rindex("}")] + wrapper + "}\n"


_RENAMED_MAIN = "tilefoundry_main"


class JaxFunction(NamedTuple):
    """Our module as a jitted jax function."""

    call: Callable[..., Any]
    """`jax.jit(exported.call)`: takes numpy or jax arrays, returns a tuple of jax arrays."""
    wide: bool
    """The module has a 64-bit dtype, so x64 must be on around the call (else jax narrows)."""
    results: int
    """How many results `main` returns."""


def jax_function(
    text: str,
    *,
    in_shardings: Any = None,
    out_shardings: Any = None,
    num_devices: int = 1,
    donate_argnums: tuple[int, ...] = (),
    platforms: Sequence[str] | None = None,
) -> JaxFunction:
    """Our module jitted: numpy arguments are placed by jit's C++ path. With `in_shardings` /
    `out_shardings` (NamedShardings on a mesh of `num_devices` devices) the module is an SPMD
    one: jit places each argument's blocks on their devices and returns global arrays of the
    given shardings. `donate_argnums` are jit's: jax honours them through `exported.call` (the
    lowered `main` marks each donated argument `tf.aliasing_output` of a result of its type,
    and the result reuses its buffers; tests/exits/test_device_step.py checks both).
    `platforms`: as `exported_module`'s."""
    import jax

    exported = exported_module(text, num_devices=num_devices, platforms=platforms)
    placed = {} if in_shardings is None else {"in_shardings": in_shardings}
    if out_shardings is not None:
        placed["out_shardings"] = out_shardings
    call = jax.jit(exported.call, donate_argnums=donate_argnums, **placed)
    wide = any(a.dtype in _X64_DTYPES for a in (*exported.in_avals, *exported.out_avals))
    return JaxFunction(call, wide, len(exported.out_avals))


def jitted(text: str, *, flat: bool = True, **placement: Any) -> Callable[..., Any]:
    """`f(*numpy arrays) -> flat list of numpy arrays` running the module through jit's C++
    argument path, on one device unless `placement` gives `jax_function` shardings."""
    return numpy_caller(jax_function(text, **placement), flat=flat)


def numpy_caller(function: JaxFunction, *, flat: bool = True) -> Callable[..., Any]:
    """`function` with numpy results: a flat list, or with `flat=False` and one result that
    array itself, so the per-call work is one jit call and one `np.asarray`, as for a user's own
    `jax.jit`. 64-bit dtypes are kept: x64 is on around the call when the module uses them."""
    import jax

    call, wide, results = function
    one = not flat and results == 1
    if not wide:
        if one:
            return lambda *arrays: np.asarray(call(*arrays)[0])
        return lambda *arrays: [np.asarray(o) for o in call(*arrays)]

    def run(*arrays: Any) -> Any:
        with jax.enable_x64(True):
            flat_results = [np.asarray(o) for o in call(*arrays)]
        return flat_results[0] if one else flat_results

    return run
