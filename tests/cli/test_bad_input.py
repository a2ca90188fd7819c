"""A wrong program or a wrong invocation is the user's to fix: exit status 1, one located message
(`file:line:col: error: ...` with the source line), never a traceback. Our own bugs exit 2."""

import pytest

HEADER = """from tilefoundry import Tensor, func
from tilefoundry.dsl import tf
from tilefoundry.ir.types.shard import make_mesh

TP = make_mesh((8,), ("tp",))
"""

ILL_TYPED = (
    HEADER
    + """

@func
def reads_partial(x: Tensor[(16, 64), "f32"], w: Tensor[(64 @ TP.tp, 32), "f32"]):
    return tf.relu(x @ w)
"""
)

SYNTAX_ERROR = (
    HEADER
    + """

@func
def broken(x: Tensor[(4,), "f32"])
    return x
"""
)

SHAPE_ERROR = (
    HEADER
    + """

@func
def mismatched(x: Tensor[(8,), "f32"], y: Tensor[(4,), "f32"]):
    return x + y
"""
)


def assert_user_error(done, located: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert located in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["check", "show", "emit", "run", "report"])
def test_missing_file_exits_1_with_the_path(cli, command):
    extra = ["-o", "unused.html"] if command == "report" else []
    done = cli(command, "no/such/program.py", *extra)
    assert_user_error(done, "no/such/program.py:1:1: error: no/such/program.py: no such file")


@pytest.mark.slow
def test_syntax_error_is_located(cli, write_program):
    path = write_program("syntax.py", SYNTAX_ERROR)
    done = cli("check", path)
    assert_user_error(done, f"{path}:9:")
    assert "invalid syntax" in done.stderr


@pytest.mark.slow
def test_ill_typed_sharding_is_located_with_its_fix(cli, write_program):
    path = write_program("partial.py", ILL_TYPED)
    done = cli("run", path)
    assert_user_error(done, f"{path}:10:12: error: ReLU: operand 'x' carries Partial(sum)")
    assert "insert reshard" in done.stderr
    assert "return tf.relu(x @ w)" in done.stderr  # the source line, with a caret under it


@pytest.mark.slow
def test_shape_error_is_located(cli, write_program):
    path = write_program("shapes.py", SHAPE_ERROR)
    done = cli("show", path)
    assert_user_error(done, f"{path}:10:12: error: Binary: operand shapes do not broadcast")


def test_unknown_function_lists_the_choices(cli):
    done = cli("show", "examples/mlp.py", "--func", "nope")
    assert_user_error(done, "no function 'nope'; it defines mlp")


def test_wrong_device_count_is_refused(cli):
    done = cli("run", "examples/megatron_mlp.py", "--devices", "4")
    assert_user_error(done, "its mesh has 8 devices; --devices 4 does not match")


def test_dim_outside_its_range_is_refused(cli):
    done = cli("run", "examples/dispatch_kernel.py", "--dim", "N=5000")
    assert_user_error(done, "--dim N=5000 is outside N's range [1, 1025)")


@pytest.mark.slow
def test_fused_view_of_a_symbolic_program_explains_why(cli):
    done = cli("show", "examples/dispatch_kernel.py", "--fused")
    assert_user_error(done, "examples/dispatch_kernel.py:")
    assert "needs static shapes" in done.stderr


@pytest.mark.slow
def test_an_internal_error_exits_2_with_a_short_message(cli, write_program):
    # A program that breaks `show`'s layout table stands in for a bug reached from the CLI.
    path = write_program(
        "sabotage.py",
        HEADER
        + "\nimport tilefoundry.cli.commands\n\n"
        + "tilefoundry.cli.commands.value_rows = lambda fn, spmd: [][1]\n\n"
        + '@func\ndef f(x: Tensor[(4,), "f32"]):\n    return x + x\n',
    )
    done = cli("show", path)
    assert done.returncode == 2
    assert done.stderr.startswith("internal error: IndexError: list index out of range")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_usage_mistake_exits_1(cli):
    done = cli("run", "examples/mlp.py", "--backend", "tpu")
    assert_user_error(done, "invalid choice: 'tpu'")
