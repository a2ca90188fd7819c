"""jaxlib's StableHLO as the judge of what the emitter writes (imported lazily: jax is optional).

A module the toolchain rejects is our bug, not the user's, so rejections surface as
InternalCompilerError carrying the toolchain's diagnostics and the offending text.
"""

from __future__ import annotations

from tilefoundry.caches import memoize
from tilefoundry.errors import InternalCompilerError, UnsupportedError
from tilefoundry.exits.stablehlo.module_header import STABLEHLO_TARGET_VERSION


def _import_mlir():
    try:
        from jaxlib.mlir import ir, passmanager
        from jaxlib.mlir._mlir_libs import _jax_mlir_ext
        from jaxlib.mlir.dialects import chlo, sdy, stablehlo
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise UnsupportedError(
            "the StableHLO toolchain needs jaxlib: pip install 'tilefoundry[xla]'"
        ) from err
    return ir, passmanager, _jax_mlir_ext, chlo, sdy, stablehlo


def make_context():
    """An MLIR context with func/stablehlo/chlo/sdy registered (stablehlo alone lacks `func`)."""
    ir, _, jax_ext, chlo, sdy, stablehlo = _import_mlir()
    ctx = ir.Context()
    registry = ir.DialectRegistry()
    jax_ext.register_dialects(registry)
    ctx.append_dialect_registry(registry)
    ctx.load_all_available_dialects()
    for dialect in (stablehlo, chlo, sdy):
        dialect.register_dialect(ctx)
    return ctx


def _rejected(what: str, err: Exception, text: str) -> InternalCompilerError:
    return InternalCompilerError(
        f"StableHLO exit: jaxlib {what}:\n{err}\n--- emitted text ---\n{text}"
    )


def parse_and_verify(text: str) -> None:
    """Parse (which verifies) and verify again; raises InternalCompilerError on rejection."""
    ir, *_ = _import_mlir()
    with make_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
            module.operation.verify()
        except ir.MLIRError as err:
            raise _rejected("rejected the module", err, text) from None


@memoize("jaxlib: StableHLO versions", 1)
def toolchain_versions() -> tuple[str, str]:
    """(current, minimum) StableHLO versions of the installed jaxlib."""
    *_, stablehlo = _import_mlir()
    return stablehlo.get_current_version(), stablehlo.get_minimum_version()


def _legalize_chlo(text: str) -> str:
    """The module with its CHLO ops (erf) rewritten as StableHLO: VHLO has no form for them, so
    jax.export legalizes them the same way before it serialises."""
    if "chlo." not in text:
        return text
    ir, passmanager, *_, stablehlo = _import_mlir()
    stablehlo.register_stablehlo_passes()
    with make_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
            pipeline = "builtin.module(func.func(chlo-legalize-to-stablehlo))"
            passmanager.PassManager.parse(pipeline).run(module.operation)
        except ir.MLIRError as err:
            raise _rejected("cannot legalize its CHLO ops", err, text) from None
        return str(module)


def serialize_portable(text: str, *, shardy: bool = False) -> bytes:
    """The VHLO portable artifact at the pinned target version. Converting to that version first
    through the pass pipeline turns "uses a feature newer than the target" into a diagnostic.

    `shardy=True` is an SPMD module: its StableHLO is versioned the same way and its Shardy ops
    and attributes (`sdy.mesh`, `sdy.manual_computation`, `sdy.sharding`, which VHLO has no
    form for) travel beside it in their own dialect, as `jax.export` serialises sharded
    programs (jaxlib's `allow_other_dialects`)."""
    ir, passmanager, *_, stablehlo = _import_mlir()
    text = _legalize_chlo(text)
    if shardy:
        with make_context(), ir.Location.unknown():
            try:
                module = ir.Module.parse(text)
                return stablehlo.serialize_portable_artifact(
                    module, STABLEHLO_TARGET_VERSION, allow_other_dialects=True
                )
            except (ir.MLIRError, ValueError) as err:
                raise _rejected(
                    f"cannot express the module at {STABLEHLO_TARGET_VERSION}", err, text
                ) from None
    stablehlo.register_stablehlo_passes()
    with make_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
            pipeline = (
                "builtin.module(stablehlo-legalize-to-vhlo,"
                f"vhlo-to-version{{target={STABLEHLO_TARGET_VERSION}}})"
            )
            passmanager.PassManager.parse(pipeline).run(module.operation)
        except ir.MLIRError as err:
            raise _rejected(
                f"cannot express the module at {STABLEHLO_TARGET_VERSION}", err, text
            ) from None
    try:
        return stablehlo.serialize_portable_artifact_str(text, STABLEHLO_TARGET_VERSION)
    except ValueError as err:
        raise _rejected("failed to serialise", err, text) from None
