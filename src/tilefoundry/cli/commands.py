"""The subcommands that read a program and describe it: check, show, emit, report, demo.

`run` lives in its own module (inputs, backends and the oracle make it the largest).
"""

from __future__ import annotations

import argparse
import sys

from rich.table import Table

from tilefoundry.cli import visible
from tilefoundry.cli.console import plain, progress, stdout_console
from tilefoundry.cli.output import check_output_path, write_output
from tilefoundry.cli.program import Program, bind_dims, dim_options, dim_vars, load_program
from tilefoundry.errors import UnsupportedError, VerifyError
from tilefoundry.inspect.shard_view import shape_text, short_type, value_rows
from tilefoundry.ir.core import Module, SourceSpan, source_span
from tilefoundry.ir.hir import Function
from tilefoundry.ir.text import format_ir


def entry_of(args: argparse.Namespace) -> tuple[Program, Function]:
    with progress(f"parsing {args.file}"):
        program = load_program(args.file)
    return program, program.entry(args.func)


def require_static(fn: Function, what: str) -> None:
    """The tensor tier (legalize, fuse, StableHLO without bindings) needs static shapes."""
    names = list(dim_vars(fn))
    if names:
        raise VerifyError(
            f"Function {fn.name}: {what} needs static shapes, but its parameters use the DimVar(s) "
            f"{', '.join(names)}; the HIR form (without --fused) prints them symbolically",
            location=source_span(fn),
        )


def compile_fn(fn: Function):
    from tilefoundry.passes import compile

    with progress(f"compiling {fn.name} (legalize, verify, fuse, verify)"):
        return compile(fn)


def check(args: argparse.Namespace) -> int:
    from tilefoundry.passes import verify

    program = load_program(args.file)
    names = program.names()
    if not names:
        raise VerifyError(
            f"{args.file}: defines no @func or @module", location=SourceSpan(args.file, 1, 1)
        )
    if args.func is not None:
        verify(program.entry(args.func))
        names = [args.func]
    else:
        verify_all(list(program.objects.values()))
    print(f"{args.file}: ok ({len(names)} function(s) typed and verified: {', '.join(names)})")
    return 0


def verify_all(objects: list[Function | Module]) -> None:
    """Verify every object, each Function once: verifying a caller verifies its callees first,
    so the objects are taken last-defined first and one a verified caller covered is skipped
    (verifying each of a 2,000-deep chain of calls on its own re-verified its whole chain)."""
    from tilefoundry.ir.hir.walk import callees_first
    from tilefoundry.passes import verify

    covered: set[Function] = set()
    for obj in reversed(objects):
        functions = obj.functions if isinstance(obj, Module) else (obj,)
        if all(fn in covered for fn in functions):
            continue
        verify(obj)
        for fn in functions:
            covered.update(callees_first(fn))


def show(args: argparse.Namespace) -> int:
    from tilefoundry.exits.stablehlo.spmd import lower_spmd_or_none

    _, fn = entry_of(args)
    if args.fused:
        require_static(fn, "--fused (fusion runs on the tensor tier)")
        fn, report = compile_fn(fn)
    console = stdout_console()
    console.print(format_ir(fn), end="", markup=False)
    if args.fused:
        console.print(f"\n{report}", markup=False)
    rows = [r for r in value_rows(fn, lower_spmd_or_none(fn)) if r.states]
    if not rows:
        console.print("\nno sharded values: every value is whole on one device")
        return 0
    table = Table(title="shard layouts (per value)", title_justify="left")
    for header in ("value", "op", "global", "mesh axes", "per-device shape", "reshard"):
        table.add_column(header)
    for row in rows:
        cells = (
            row.name,
            row.op,
            short_type(row.type_),
            row.states,
            f"{shape_text(row.local)} x {row.devices}",
            "; ".join(row.collectives),
        )
        table.add_row(*map(plain, cells))  # names may hold rich markup
    console.print()
    console.print(table)
    from tilefoundry.ir.hir.device_memory import device_memory

    console.print(
        f"memory per device (estimate from the types): {device_memory(fn).describe()}",
        markup=False,
    )
    return 0


def emit(args: argparse.Namespace) -> int:
    from tilefoundry.exits.stablehlo import emit_stablehlo
    from tilefoundry.passes import verify

    if args.portable and not args.output:
        raise VerifyError("emit --portable writes a binary artifact; give -o FILE")
    if args.platform and not args.portable:
        raise VerifyError(
            "emit --platform names the platforms of a portable artifact; add --portable"
        )
    out = check_output_path(args.output, [args.file]) if args.output else None
    _, fn = entry_of(args)
    given = dim_options(args.dim)
    verify(fn)  # a program `check` refuses is never emitted
    if getattr(args, "pallas", False):
        from tilefoundry.cli.emit_pallas import pallas_text

        artifact = pallas_text(args, fn, given)
    else:
        if not given:
            require_static(fn, "StableHLO emission without --dim")
        bindings = bind_dims(fn, given, None) or None
        with progress(f"emitting StableHLO for {fn.name}"):
            if args.platform:
                artifact = _exported_artifact(fn, bindings, args.platform)
            else:
                artifact = emit_stablehlo(fn, bindings=bindings, portable=args.portable)
    if out is None:
        sys.stdout.write(artifact)
        return 0
    size = write_output(out, artifact)
    print(visible(f"wrote {out.path} ({size} bytes, @{fn.name})"))
    return 0


def _exported_artifact(fn, bindings, platforms: list[str]) -> bytes:
    """The one-device module as a serialised `jax.export.Exported` declared for `platforms`
    (the module itself is platform-independent; jax refuses to call an artifact on a platform
    it does not declare)."""
    from tilefoundry.exits.stablehlo import emit_stablehlo
    from tilefoundry.exits.stablehlo.one_device import on_a_device_mesh

    if on_a_device_mesh(fn, bindings):
        raise UnsupportedError(
            f"emit --platform: {fn.name} is a sharded program, whose SPMD module the jax.export "
            "artifact would need its shardings for; drop --platform to write its VHLO artifact"
        )
    from tilefoundry.exits.runtimes.xla_jit import exported_module

    exported = exported_module(emit_stablehlo(fn, bindings=bindings), platforms=platforms)
    try:
        return exported.serialize()
    except ImportError as err:  # jax's serialisation imports flatbuffers
        raise UnsupportedError(f"emit --platform: {err} (pip install -e '.[xla]')") from None


def report(args: argparse.Namespace) -> int:
    from tilefoundry.exits.stablehlo.spmd import lower_spmd_or_none
    from tilefoundry.inspect.report import render_report

    out = check_output_path(args.output, [args.file])
    program, fn = entry_of(args)
    fusion = None
    note = ""
    if dim_vars(fn):
        note = "DimVar shapes: drawn before fusion (fusion runs on static shapes)"
    else:
        fn, fusion = compile_fn(fn)
    with progress("drawing the report"):
        page = render_report(
            fn, fusion, spmd=lower_spmd_or_none(fn), source=program.path, note=note
        )
    size = write_output(out, page)
    print(visible(f"wrote {out.path} ({size} bytes): @{fn.name}"))
    return 0


def demo(args: argparse.Namespace) -> int:
    from tilefoundry.demo import run_demo

    return 0 if run_demo(sys.stdout) else 1
