"""A DSL file runs as `python FILE` runs a script (issue 29): its folder first on `sys.path`, so
a program split over two files imports its sibling from any working directory, and `__file__`
names the file, so it can find data beside it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tilefoundry.cli.program import load_program

SIZES = """
from tilefoundry.ir.types.shard import B, Layout, ShardLayout, make_mesh

TP = make_mesh((8,), ("tp",))
BATCH, MODEL, HIDDEN = 4, 16, 64
REPLICATED = ShardLayout(Layout((BATCH, MODEL)), (B,), TP)
"""

MODEL = """
# ruff: noqa: F821
from pathlib import Path

import numpy as np

from {sizes} import BATCH, HIDDEN, MODEL, REPLICATED, TP
from tilefoundry import Tensor, func
from tilefoundry.dsl import tf

SCALE = np.load(Path(__file__).with_name("scale.npy"))


@func
def mlp(
    x: Tensor[(BATCH, MODEL), "f32"],
    w1: Tensor[(MODEL, HIDDEN @ TP.tp), "f32"],
    w2: Tensor[(HIDDEN @ TP.tp, MODEL), "f32"],
):
    partial = tf.relu(x @ w1) @ w2
    return tf.reshard(partial * SCALE, layout=REPLICATED, storage="gmem")
"""


def two_file_program(folder, sizes: str):
    folder.mkdir()
    (folder / f"{sizes}.py").write_text(SIZES, encoding="utf-8")
    (folder / "model.py").write_text(MODEL.format(sizes=sizes), encoding="utf-8")
    np.save(folder / "scale.npy", np.float32(0.5))
    return folder / "model.py"


@pytest.mark.slow
def test_run_from_another_directory_imports_the_sibling_file(cli, tmp_path):
    model = two_file_program(tmp_path / "program", "sizes")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = cli("run", str(model), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "run @mlp from" in done.stdout and "agrees, max |diff|" in done.stdout
    checked = cli("check", "../program/model.py", cwd=elsewhere)  # a relative path as well
    assert checked.returncode == 0, checked.stderr
    assert "ok (1 function(s) typed and verified: mlp)" in checked.stdout


def test_loading_leaves_sys_path_as_it_was(tmp_path):
    model = two_file_program(tmp_path / "program", "sizes_for_the_path_test")
    before = list(sys.path)
    program = load_program(str(model))
    assert sys.path == before
    assert program.entry(None).name == "mlp"
    assert sys.modules["sizes_for_the_path_test"].__file__ == str(
        (tmp_path / "program" / "sizes_for_the_path_test.py").resolve()
    )
