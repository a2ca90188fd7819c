"""What runs inside the 8-device worker (`devices8`, tests/conftest.py): one variant of
examples/llama.py on 8 XLA devices, the program as written or after the pass pipeline (fusion
regions and all)."""

from __future__ import annotations

from typing import Any


def run_on_devices(name: str, arrays: tuple, compiled: bool) -> tuple[str, Any]:
    """("ok", result) or ("error", "<ErrorClass>: <message>"): an exception object may not
    survive pickling, and the test compares the text with the refusal it expects."""
    from llama_layer.llama_cases import program
    from tilefoundry.exits.runtimes.xla import run_xla
    from tilefoundry.passes import compile as compile_pipeline

    fn = program(name)
    try:
        if compiled:
            fn = compile_pipeline(fn)[0]
        return "ok", run_xla(fn, *arrays, devices=8)
    except Exception as err:  # reported to the test, which decides what it means
        message = getattr(err, "message", str(err))
        return "error", f"{type(err).__name__}: {message}"
