"""What runs inside the 8-device worker process (`devices8`, tests/conftest.py).

`run_program` runs one program of `sharded_programs` by name, so only names and numpy arrays
cross the process boundary.
"""


def run_program(name: str, arrays: tuple, devices: int, compiled: bool = False):
    """`compiled` runs the program after the pass pipeline (fusion regions and all)."""
    from exits.spmd.sharded_programs import PROGRAMS, STACKED
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.passes import compile as compile_pipeline

    fn = {**PROGRAMS, **STACKED}[name].sharded
    if compiled:
        fn = compile_pipeline(fn)[0]
    return run_xla(fn, *arrays, devices=devices)


def run_named(module: str, name: str, arrays: tuple, devices: int):
    """Run the Function `name` of test module `module` (importable from tests/) on XLA devices."""
    import importlib

    from tilefoundry.exits.runtimes.xla import run_xla

    return run_xla(getattr(importlib.import_module(module), name), *arrays, devices=devices)


def run_error(name: str, arrays: tuple, devices: int) -> str:
    """The message run_xla fails with (an exception object may not survive pickling)."""
    try:
        run_program(name, arrays, devices)
    except Exception as err:  # the test asserts on the type name and message
        return f"{type(err).__name__}: {err}"
    return "no error"


def compiled_collectives(name: str) -> list[str]:
    """The collective instructions XLA's CPU compiler leaves in the executable of a program's
    module (so a test can tell that XLA runs what the exit wrote, not a decomposition)."""
    import re

    from exits.spmd.sharded_programs import PROGRAMS
    from tilefoundry.exits.runtimes.xla_spmd import _compile
    from tilefoundry.exits.stablehlo.spmd import emit_spmd

    executable, _ = _compile(emit_spmd(PROGRAMS[name].sharded), PROGRAMS[name].devices)
    text = "\n".join(m.to_string() for m in executable.hlo_modules())
    return re.findall(r" (all-reduce|reduce-scatter|all-gather|all-to-all)(?:-start)?\(", text)


def device_count() -> int:
    import jax

    return len(jax.devices("cpu"))


def run_random(seeds: list[int]) -> dict[int, object]:
    """Each random sharded program (`random_sharded.valid`) run by run_xla on 8 devices: its
    result, or the error it failed with as text (an exception may not survive pickling)."""
    from exits.spmd.random_sharded import DEVICES, valid
    from tilefoundry.exits.runtimes.xla import run_xla

    outcomes: dict[int, object] = {}
    for seed in seeds:
        program = valid(seed)
        try:
            outcomes[seed] = run_xla(program.fn, *program.arguments, devices=DEVICES)
        except Exception as err:  # the test reports the type name and message
            outcomes[seed] = f"{type(err).__name__}: {err}"
    return outcomes
