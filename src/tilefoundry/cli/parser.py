"""The argument parser: one subcommand per job, each with examples in its epilog, because the
help text is the first documentation a user reads."""

from __future__ import annotations

import argparse
import sys

from tilefoundry.cli import commands, run
from tilefoundry.exits.pallas.gpu import GPU_BACKENDS

EXPORT_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
"""The platform names jax.export declares (`jax.export.default_export_platform()`'s values)."""

EPILOG = """\
examples:
  tilefoundry check examples/mlp.py
  tilefoundry show examples/megatron_mlp.py --fused
  tilefoundry emit examples/transformer_block.py -o block.mlir
  tilefoundry run examples/transformer_block.py --backend xla
  tilefoundry run examples/dispatch_kernel.py --dim N=600
  tilefoundry report examples/mesh_2d.py -o mesh_2d.html
  tilefoundry validate --op Binary --samples 20
  tilefoundry demo

A FILE is a Python file of @func / @module definitions (see examples/). Commands act on the
last one it defines (for a @module, its last function) unless --func NAME picks another.
A FILE is executed (its top level runs) to build its functions, as python runs a script: its
folder first on sys.path (it imports the files beside it), __file__ set; only give it files you
would run with python. Its sys.exit() is reported as the file's error, but an os._exit() there ends
the command at once with the status the file chose (nothing in-process can catch it).
Exit status: 0 ok, 1 the program or its inputs are wrong (a located message), 2 a tilefoundry bug,
130 interrupted (Ctrl-C; 143 for SIGTERM, 129 for SIGHUP).
"""


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are the user's to fix, so they exit 1 like every other bad input (argparse
    would exit 2, which this command reserves for its own bugs)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=INT (e.g. N=128), got {text!r}")
    return name, int(value)


def _seed(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return value


def _size(text: str) -> int:
    from tilefoundry.ir.hir.device_memory import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_program(sub: argparse.ArgumentParser, *, dims: bool = True) -> None:
    sub.add_argument("file", metavar="FILE", help="a DSL file (Python with @func / @module)")
    sub.add_argument("--func", metavar="NAME", help="the function to use: NAME or Module.NAME")
    if dims:
        sub.add_argument(
            "--dim",
            metavar="NAME=INT",
            type=_dim,
            action="append",
            default=[],
            help="bind a DimVar to a concrete extent (repeatable)",
        )


def _command(commands_, name: str, help_: str, epilog: str) -> argparse.ArgumentParser:
    return commands_.add_parser(
        name,
        help=help_,
        description=help_,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tilefoundry",
        description="A compiler for shape-typed, sharding-typed tensor programs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = _command(
        subs,
        "check",
        "parse, type and verify a program; report every refusal with its location",
        "example:\n  tilefoundry check examples/megatron_mlp.py",
    )
    _add_program(check, dims=False)
    check.set_defaults(handler=commands.check)

    show = _command(
        subs,
        "show",
        "print the canonical IR and where every sharded value lives",
        "examples:\n  tilefoundry show examples/mesh_2d.py\n"
        "  tilefoundry show examples/mlp.py --fused   # after legalize + fuse",
    )
    _add_program(show, dims=False)
    show.add_argument("--fused", action="store_true", help="show the program after compile()")
    show.set_defaults(handler=commands.show)

    emit = _command(
        subs,
        "emit",
        "emit StableHLO (text, or the portable artifact) for a program",
        "examples:\n  tilefoundry emit examples/mlp.py\n"
        "  tilefoundry emit examples/mlp.py --portable -o mlp.vhlo\n"
        "  tilefoundry emit examples/mlp.py --portable --platform cuda --platform cpu -o mlp.jax\n"
        "  tilefoundry emit examples/dispatch_kernel.py --dim N=100 -o n100.mlir\n"
        "  tilefoundry emit examples/flash_attention.py --pallas   # grid, BlockSpecs, jaxpr",
    )
    _add_program(emit)
    emit.add_argument("-o", "--output", metavar="OUT", help="write here instead of stdout")
    emit.add_argument(
        "--portable", action="store_true", help="the versioned portable artifact (needs -o)"
    )
    emit.add_argument(
        "--platform",
        action="append",
        choices=EXPORT_PLATFORMS,
        help="with --portable: a jax.export artifact (jax.export.deserialize) declared for this "
        "platform instead of bare VHLO; repeat it for several",
    )
    emit.add_argument(
        "--pallas",
        action="store_true",
        help="the Pallas kernel of a tile program instead: its grid, BlockSpecs and jaxpr",
    )
    emit.set_defaults(handler=commands.emit)

    runner = _command(
        subs,
        "run",
        "run a program and check it against the reference oracle",
        "examples:\n  tilefoundry run examples/mlp.py\n"
        "  tilefoundry run examples/transformer_block.py --backend xla --seed 3\n"
        "  tilefoundry run examples/megatron_mlp.py --backend xla --devices 8\n"
        "  tilefoundry run examples/megatron_mlp.py --backend xla --devices 8 --processes 2\n"
        "  tilefoundry run examples/flash_attention.py --backend pallas\n"
        "  tilefoundry run examples/online_softmax.py --backend pallas --gpu-backend triton\n"
        "  tilefoundry run examples/mlp.py --inputs x.npy w1.npy b1.npy w2.npy b2.npy\n\n"
        "Inputs are drawn from the parameter types (seeded) unless --inputs gives .npy files.\n"
        "The reference backend runs the fused program and compares it with the unfused one;\n"
        "the xla backend compares XLA's results with the reference evaluator; the pallas\n"
        "backend runs a tile program as one Pallas kernel (interpret mode without a GPU;\n"
        "compiled through Triton, or Mosaic GPU with --gpu-backend mosaic, on a GPU).\n\n"
        "The oracle judge compares element by element: NaN equals NaN, an infinity must match\n"
        "exactly, integers exactly, and floats within atol * scale + rtol * |expected|, where\n"
        "scale is the median magnitude of the expected values (at least 1). Defaults by dtype\n"
        "(rtol, atol): float64 1e-9, 1e-9; float32 1e-4, 1e-5; float16 1e-2, 1e-2;\n"
        "bfloat16 5e-2, 5e-2; 8-bit floats 0.25, 0.25. --rtol / --atol override them.",
    )
    _add_program(runner)
    runner.add_argument("--backend", choices=("reference", "xla", "pallas"), default="reference")
    runner.add_argument(
        "--gpu-backend",
        choices=GPU_BACKENDS,
        help="with --backend pallas: the GPU lowering of the compiled kernel (default triton); "
        "without a GPU the kernel is interpreted, and the backend's constraints are checked",
    )
    runner.add_argument(
        "--devices", type=int, metavar="N", help="devices for a sharded program (its mesh size)"
    )
    runner.add_argument(
        "--processes",
        type=int,
        metavar="P",
        help="run the sharded program in P local processes (N/P devices each, jax.distributed)",
    )
    runner.add_argument(
        "--timeout",
        type=_seconds,
        default=300.0,
        metavar="S",
        help="with --processes: stop every worker and fail if the run takes longer (default 300)",
    )
    runner.add_argument(
        "--device-memory",
        type=_size,
        metavar="SIZE",
        help="refuse, before the run, a program whose estimated memory per device (arguments "
        "and the peak of its computed values, from the types) is over SIZE, e.g. 80G",
    )
    runner.add_argument("--seed", type=_seed, default=0, help="seed for inputs and DimVars")
    runner.add_argument("--inputs", nargs="+", metavar="NPY", help="one .npy file per parameter")
    runner.add_argument(
        "--rtol", type=_tolerance, metavar="R", help="relative tolerance of the oracle judge"
    )
    runner.add_argument(
        "--atol", type=_tolerance, metavar="A", help="absolute tolerance of the oracle judge"
    )
    runner.set_defaults(handler=run.run)

    report = _command(
        subs,
        "report",
        "write a self-contained HTML page drawing the program as a graph",
        "example:\n  tilefoundry report examples/megatron_mlp.py -o megatron.html\n\n"
        "Ops are nodes, fusion regions boxes, edges carry shape/dtype and shard layout,\n"
        "Reshards are highlighted with their collective; a table lists per-device shapes.",
    )
    _add_program(report, dims=False)
    report.add_argument("-o", "--output", metavar="HTML", required=True, help="the page to write")
    report.set_defaults(handler=commands.report)

    _command(
        subs,
        "validate",
        "check every op's sharding rules against simulated execution",
        "examples:\n  tilefoundry validate\n  tilefoundry validate --op MatMul --samples 10\n"
        "  tilefoundry validate --help   # the validator's own flags",
    )

    demo = _command(
        subs,
        "demo",
        "a computed tour: a transformer block end to end, fusion, sharding, XLA",
        "example:\n  tilefoundry demo",
    )
    demo.set_defaults(handler=commands.demo)
    return parser
