"""Careless and hostile inputs as regression probes (issue 20: "A `tests/` suite of these probes
as regression tests (a table of inputs -> expected exit code and message fragment), so none of
them comes back"; done when "no probe in that suite yields exit 2, a traceback, a hang, a
segfault or a changed input file").

Each probe writes one program, runs one command on it, and checks the exit status, a fragment
of the output (stderr for a refusal, stdout for a success) and that the program file is
byte-for-byte unchanged."""

from __future__ import annotations

import os
import signal
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest

from cli.conftest import REPO
from cli.conftest import command as cli_command

pytestmark = pytest.mark.slow  # every test here runs the command in a subprocess

HEAD = """\
from tilefoundry import DimVar, Tensor, func
from tilefoundry.dsl import tf
"""

PROGRAMS = {
    "ok": HEAD
    + """
@func
def f(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:
    return tf.exp(x)
""",
    "huge_dim": HEAD
    + """
@func
def f(x: Tensor[(2**63,), "f32"]) -> Tensor[(2**63,), "f32"]:
    return tf.exp(x)
""",
    "unicode_name": HEAD
    + """
@func
def 函数(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:
    return tf.exp(x)
""",
    "dimvar": HEAD
    + """
N = DimVar("N", 1, 64)

@func
def f(x: Tensor[(N,), "f32"]) -> Tensor[(N,), "f32"]:
    return tf.exp(x)
""",
    "zero_dim": HEAD
    + """
@func
def f(x: Tensor[(0, 4), "f32"]) -> Tensor[(0, 4), "f32"]:
    return tf.exp(x) + x
""",
    "tera": HEAD
    + """
@func
def f(x: Tensor[(10**12,), "f32"]) -> Tensor[(10**12,), "f32"]:
    return tf.exp(x)
""",
    "tera_zeros": HEAD
    + """
@func
def f(x: Tensor[(4,), "f32"]):
    return tf.zeros((10**6, 10**6), "f32")
""",
    "bom": "\ufeff" + HEAD + "\n@func\ndef f(x: Tensor[(4,), 'f32']):\n    return x\n",
    "latin1_cookie": "# -*- coding: latin-1 -*-\n"
    + HEAD
    + "\n@func\ndef f(x: Tensor[(4,), 'f32']):\n    return x\n",
    "exits_0": HEAD + "import sys\nsys.exit(0)\n",
    "raises_interrupt": HEAD + "raise KeyboardInterrupt\n",
    "raises_base": HEAD + "class Stop(BaseException):\n    pass\n\nraise Stop('now')\n",
    # DESIGN §3 spells a dimension split over two mesh axes `N @ (m.a, m.b)`; in an annotation
    # Python evaluates `int @ tuple` itself (TypeError) before any of our code runs
    "tuple_split": HEAD
    + """from tilefoundry.ir.types.shard import make_mesh

M = make_mesh((2, 4), ("a", "b"))

@func
def f(x: Tensor[(16 @ (M.a, M.b), 8), "f32"]):
    return tf.exp(x)
""",
    "grouped_split": HEAD
    + """from tilefoundry.ir.types.shard import make_mesh

M = make_mesh((2, 4), ("a", "b"))

@func
def f(x: Tensor[(16 @ (M.a * M.b), 8), "f32"]):
    return tf.exp(x)
""",
}


def _returning(expression: str) -> str:
    """A program whose one function returns `expression` (on line 6, column 5)."""
    return HEAD + f'\n@func\ndef f(x: Tensor[(4,), "f32"]):\n    return {expression}\n'


def _on_mesh(mesh: str, annotation: str, body: str = "tf.exp(x)") -> str:
    return (
        HEAD
        + "from tilefoundry.ir.types.shard import make_mesh\n\n"
        + f"M = make_mesh{mesh}\n\n@func\ndef f(x: {annotation}):\n    return {body}\n"
    )


# Issue 28's hostile inputs (the outputs' cases are in test_output_safety.py)
PROGRAMS |= {
    "deep_negs": _returning("-" * 100_000 + "x"),
    "deep_power": _returning("**".join(["x"] * 20_000)),
    "adds_200k": _returning("+".join(["x"] * 200_000)),
    "rank_200": HEAD + '\n@func\ndef f(x: Tensor[(1,) * 200, "f32"]):\n    return tf.exp(x)\n',
    "huge_dimvar": HEAD
    + 'N = DimVar("N", 1, 10**30)\n\n@func\ndef f(x: Tensor[(N,), "f32"]):\n    return x\n',
    "markup_dimvar": HEAD
    + 'N = DimVar("[bold red]N[/", 1, 8)\n'
    + _on_mesh('((2,), ("x",))', 'Tensor[(N, 4 @ M.x), "f32"]').removeprefix(HEAD),
    "escape_dimvar": HEAD
    + 'N = DimVar("N\\x1b[31m", 1, 8)\n\n@func\ndef f(x: Tensor[(N,), "f32"]):\n    return x\n',
    "escape_module": HEAD
    + "from tilefoundry import module\n\n"
    + '@module(name="m\\x1b[2J")\nclass M:\n    @func\n'
    + '    def f(x: Tensor[(4,), "f32"]):\n        return x\n',
    "escape_function": HEAD
    + 'def rename(fn):\n    fn.__name__ = "f\\x1b[2Jx"\n    return fn\n\n'
    + '@func\n@rename\ndef f(x: Tensor[(4,), "f32"]):\n    return x\n',
    "narrow_floats": HEAD
    + '\n@func\ndef f(x: Tensor[(4,), "bf16"], y: Tensor[(4,), "fp8e4m3"]):\n'
    + "    return tf.exp(x)\n",
    "one_device_mesh": _on_mesh('((1,), ("x",))', 'Tensor[(4 @ M.x, 4), "f32"]'),
    "tau_axis": _on_mesh('((2,), ("τ",))', 'Tensor[(4 @ M.τ, 4), "f32"]'),
    "other_mesh": _on_mesh(
        '((2,), ("x",))',
        'Tensor[(4 @ M.x, 4), "f32"]',
        "tf.reshard(x, layout=make_shard_tensor_type("
        '(4, 4), mesh=make_mesh((4,), ("y",)), attrs=(Split(0),)).layout)',
    ).replace(
        "import make_mesh\n",
        "import Split, make_mesh\nfrom tilefoundry.ir.types import make_shard_tensor_type\n",
    ),
}

PROCESSES = ["run", "--backend", "xla", "--processes", "2"]
TOO_DEEP = "probe.py:6:5: error: Module probe.py: an expression is nested too deeply for Python's"

LOADING = "Module probe.py: the program "

PROBES = [
    # (id, program, argv after the command's FILE, exit status, fragment)
    ("emit verifies first", "huge_dim", ["emit"], 1, "dimension-product overflow"),
    ("emit mangles a non-ASCII name", "unicode_name", ["emit"], 0, "module @_U51FD__U6570_ "),
    ("emit --dim of an unknown DimVar", "ok", ["emit", "--dim", "N=5"], 1, "--dim names N"),
    ("emit --dim of another DimVar", "dimvar", ["emit", "--dim", "M=5"], 1, "--dim names M"),
    ("emit --dim twice", "dimvar", ["emit", "--dim", "N=5", "--dim", "N=6"], 1, "given twice"),
    ("emit --dim outside the range", "dimvar", ["emit", "--dim", "N=0"], 1, "outside N's range"),
    ("emit without a needed --dim", "dimvar", ["emit"], 1, "needs static shapes"),
    ("emit --dim binds", "dimvar", ["emit", "--dim", "N=5"], 0, "tensor<5xf32>"),
    ("emit onto the program", "ok", ["emit", "-o", "{file}"], 1, "is the input file"),
    ("report onto the program", "ok", ["report", "-o", "{file}"], 1, "is the input file"),
    ("emit into a missing dir", "ok", ["emit", "-o", "{tmp}/no/x.mlir"], 1, "does not exist"),
    ("emit onto a directory", "ok", ["emit", "-o", "{tmp}"], 1, "is a directory"),
    ("run with a negative rtol", "ok", ["run", "--rtol", "-1"], 1, "finite number >= 0"),
    ("run with a NaN atol", "ok", ["run", "--atol", "nan"], 1, "finite number >= 0"),
    ("run run --inputs all NaN", "ok", ["run", "--inputs", "{nan}"], 0, "agrees"),
    ("run run --inputs all -inf", "ok", ["run", "--inputs", "{ninf}"], 0, "agrees"),
    (
        "zero-size dims at run",
        "zero_dim",
        ["run"],
        1,
        "py:5:7: error: compile: Function f: parameter 'x' has the zero-size type",
    ),
    ("zero-size dims at show --fused", "zero_dim", ["show", "--fused"], 1, "zero-size type"),
    ("10**12 elements at run", "tera", ["run"], 1, "error: run: Function f needs about 7.3 TiB"),
    ("zeros of 10**12", "tera_zeros", ["run"], 1, "Function f needs about 3.6 TiB"),
    ("a UTF-8 BOM", "bom", ["check"], 0, "ok (1 function(s)"),
    ("a latin-1 coding cookie", "latin1_cookie", ["check"], 0, "ok (1 function(s)"),
    (
        "a lying .npy header",
        "ok",
        ["run", "--inputs", "{liar}"],
        1,
        "header claims a float32 array of shape (1000000000000,)",
    ),
    ("a FIFO as --inputs", "ok", ["run", "--inputs", "{fifo}"], 1, "not a regular file"),
    ("run --seed -1", "ok", ["run", "--seed", "-1"], 1, "expected an integer >= 0"),
    ("the file's sys.exit(0)", "exits_0", ["check"], 1, "py:4:1: error: " + LOADING + "called"),
    ("the file's Ctrl-C", "raises_interrupt", ["run"], 1, "py:3:1: error: " + LOADING + "raised"),
    ("the file's BaseException", "raises_base", ["show"], 1, LOADING + "raised Stop: now"),
    (
        "N @ (m.a, m.b) names the fix",
        "tuple_split",
        ["check"],
        1,
        "probe.py:8:18: error: Module probe.py: `N @ (m.a, m.b)` cannot split a dimension over a "
        "tuple of mesh axes in an annotation",
    ),
    ("N @ (m.a, m.b) fix, spelled out", "tuple_split", ["run"], 1, "`N @ (m.a * m.b)`"),
    ("the fix it names runs", "grouped_split", ["run"], 0, "agrees"),
    # issue 28: inputs
    (
        "a .npy 3.0 header claiming 4 TB",
        "ok",
        ["run", "--inputs", "{v3_liar}"],
        1,
        "header claims a float32 array of shape (1000000000000,)",
    ),
    ("a .npy header cut short", "ok", ["run", "--inputs", "{cut}"], 1, "header does not parse"),
    (
        "bf16/fp8 as numpy saves them",
        "narrow_floats",
        ["run", "--inputs", "{bf16}", "{fp8}"],
        0,
        "agrees",
    ),
    # issue 28: source
    ("a deep unary minus", "deep_negs", ["check"], 1, TOO_DEEP),
    ("a deep power chain", "deep_power", ["check"], 1, TOO_DEEP),
    ("200,000 chained adds", "adds_200k", ["check"], 1, TOO_DEEP),
    (
        "a rank-200 tensor",
        "rank_200",
        ["run"],
        1,
        "probe.py:5:10: error: Function f: parameter 'x'",
    ),
    ("a rank-200 tensor, why", "rank_200", ["check"], 1, "rank 200 exceeds 64, the most numpy"),
    ("DimVar(N, 1, 10**30) drawn", "huge_dimvar", ["run"], 1, "error: run: Function f needs about"),
    ("markup in a DimVar name", "markup_dimvar", ["show"], 0, "│ [[bold red]N[/, 1, 2] x 2 │"),
    ("markup in a DimVar name at run", "markup_dimvar", ["run"], 0, "DimVars: [bold red]N[/="),
    ("an escape in a DimVar name", "escape_dimvar", ["show"], 1, "DimVar: name 'N\\x1b[31m' holds"),
    ("an escape in a module name", "escape_module", ["check"], 1, "Module: name 'm\\x1b[2J' holds"),
    ("an escape in a function name", "escape_function", ["show"], 1, "name 'f\\x1b[2Jx' holds"),
    # issue 28: meshes
    ("a split over a 1-device mesh", "one_device_mesh", ["run", "--backend", "xla"], 0, "agrees"),
    ("a mesh axis named τ", "tau_axis", ["run", "--backend", "xla"], 0, "agrees"),
    ("τ spelled for Shardy", "tau_axis", ["emit"], 0, 'sdy.mesh @mesh = <["_U3C4_"=2]>'),
    ("a reshard onto another mesh", "other_mesh", ["check"], 1, "have no common refinement"),
    # issue 28: signals (the timeout of --processes)
    *(
        (f"--timeout {t}", "grouped_split", [*PROCESSES, "--timeout", t], 1, "seconds > 0")
        for t in ("nan", "inf")
    ),
]


@pytest.mark.parametrize(
    ("program", "argv", "status", "fragment"),
    [p[1:] for p in PROBES],
    ids=[p[0] for p in PROBES],
)
def test_probe(cli, write_program, tmp_path, program, argv, status, fragment):
    path = write_program("probe.py", PROGRAMS[program])
    places = {"file": path, "tmp": str(tmp_path)} | _input_files(tmp_path)
    command, *rest = argv
    done = cli(command, path, *(a.format(**places) for a in rest))
    shown = done.stdout if status == 0 else done.stderr
    assert done.returncode == status, (done.stdout, done.stderr)
    assert fragment in shown, shown
    assert "Traceback" not in done.stderr
    assert not set("\x1b\x07\r") & set(done.stdout + done.stderr)  # nothing drives the terminal
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == PROGRAMS[program]


def test_validate_usage_mistakes_exit_1_like_every_other_command(cli):
    done = cli("validate", "--bogus-flag")
    assert done.returncode == 1
    assert "unrecognized arguments: --bogus-flag" in done.stderr


SLOW = (
    HEAD
    + """
import sys
import time

print("loading", file=sys.stderr, flush=True)
time.sleep(60)
"""
)


@pytest.mark.parametrize("command", ["check", "run"])
def test_ctrl_c_exits_130_with_one_line(write_program, command):
    """Issue 20: "Ctrl-C at any point exits 130 with one line, no traceback, no segfault"."""
    path = write_program("slow.py", SLOW)
    child = subprocess.Popen(
        [*cli_command(), command, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stderr.readline() == "loading\n"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert err == "interrupted\n"


def _input_files(tmp_path) -> dict[str, str]:
    """The --inputs the probes name, written into tmp_path."""
    files = {name: tmp_path / f"{name}.npy" for name in ("nan", "ninf", "bf16", "fp8")}
    np.save(files["nan"], np.full(4, np.nan, np.float32))
    np.save(files["ninf"], np.full(4, -np.inf, np.float32))
    np.save(files["bf16"], np.linspace(-1, 1, 4).astype(ml_dtypes.bfloat16))  # header: |V2
    np.save(files["fp8"], np.linspace(-1, 1, 4).astype(ml_dtypes.float8_e4m3fn))  # |V1
    files["liar"], files["v3_liar"] = tmp_path / "liar.npy", tmp_path / "v3_liar.npy"
    _write_lying_npy(files["liar"])
    claim = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }"
    _write_header(files["v3_liar"], (3, 0), claim)  # numpy writes 3.0 only for UTF-8 names
    files["cut"] = tmp_path / "cut.npy"
    _write_header(files["cut"], (1, 0), "{'descr': '<f4', 'fortran_order': False, 'shape': (10,")
    files["fifo"] = tmp_path / "fifo.npy"
    os.mkfifo(files["fifo"])
    return {name: str(path) for name, path in files.items()}


def _write_lying_npy(path) -> None:
    """A 128-byte .npy whose header claims 10**12 float32 elements."""
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)}
        )


def _write_header(path, version: tuple[int, int], header: str) -> None:
    """The magic, `version` and `header` (padded as the format says), then nothing."""
    size = "<H" if version == (1, 0) else "<I"
    prefix = 6 + 2 + struct.calcsize(size)
    header += " " * (-(prefix + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as handle:
        handle.write(b"\x93NUMPY" + bytes(version) + struct.pack(size, len(header)))
        handle.write(header.encode("latin1"))


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_as_the_program_is_refused_not_read(cli, tmp_path, path):
    if path == "fifo":
        path = str(tmp_path / "prog.py")
        os.mkfifo(path)
    done = cli("check", path)
    assert done.returncode == 1
    assert "cannot read the file (not a regular file" in done.stderr


def _deep_programs() -> dict[str, str]:
    fn = '@func\ndef f(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:\n'
    calls = '@func\ndef g0(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:\n    return x + x\n'
    for i in range(1, 1000):
        calls += f'\n@func\ndef g{i}(x: Tensor[(4,), "f32"]) -> Tensor[(4,), "f32"]:\n'
        calls += f"    return g{i - 1}(x) + x\n"
    return {
        "adds": HEAD + fn + "    return " + " + ".join(["x"] * 5000) + "\n",
        "negs": HEAD + fn + "    return " + "-" * 5000 + "x\n",
        "statements": HEAD + fn + "    x = x + x\n" * 1000 + "    return x\n",
        "calls": HEAD + calls,
    }


DEEP = [
    # (program, command): issue 20 "deep programs ... all RecursionError. Walks must not depend
    # on Python's recursion limit"
    ("adds", ["check"]),
    ("adds", ["run"]),
    ("adds", ["emit"]),
    ("negs", ["show"]),
    ("statements", ["show", "--fused"]),
    ("calls", ["check"]),
    ("calls", ["run"]),
    ("calls", ["show", "--fused"]),
]


@pytest.mark.parametrize(("program", "argv"), DEEP, ids=[f"{p}-{' '.join(a)}" for p, a in DEEP])
def test_deep_programs_need_no_recursion_limit(cli, write_program, program, argv):
    path = write_program("deep.py", _deep_programs()[program])
    done = cli(argv[0], path, *argv[1:])
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_xla_refuses_call_chains_its_compiler_crashes_on(cli, write_program):
    path = write_program("deep.py", _deep_programs()["calls"])
    done = cli("run", path, "--backend", "xla")
    assert done.returncode == 1, done.stderr
    assert "nests @func calls 1000 deep" in done.stderr


def test_markup_in_a_path_is_printed_as_written(cli, write_program):
    """Issue 20: names or paths holding rich markup were silently rewritten (or crashed)."""
    path = write_program("p[bold]q[red].py", PROGRAMS["ok"])
    done = cli("run", path)
    assert done.returncode == 0, done.stderr
    assert "p[bold]q[red].py" in done.stdout


def test_an_ansi_escape_in_a_path_does_not_reach_the_terminal(cli, tmp_path):
    done = cli("check", str(tmp_path / "a\x1b[31mred.py"))
    assert done.returncode == 1
    assert "\x1b" not in done.stderr and "a\\x1b[31mred.py: no such file" in done.stderr


def test_help_and_readme_say_os_exit_cannot_be_caught(cli, write_program):
    """Issue 20: a DSL file that "calls `os._exit`" at its top level ends the CLI with "a silent
    exit code"; nothing in-process can catch it, so the README and `--help` say so where they
    warn that a DSL file is a program (and the probe shows why: the file decides the status)."""
    done = cli("--help")
    assert done.returncode == 0
    assert "A FILE is executed (its top level runs)" in done.stdout
    assert "os._exit() there ends\nthe command at once with the status the file chose" in (
        done.stdout
    )
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "A DSL file is a Python program" in readme
    assert "but `os._exit()` (or a signal it sends itself) ends the process at once" in readme
    path = write_program("exits.py", HEAD + "import os\nos._exit(7)\n")
    assert cli("check", path).returncode == 7
