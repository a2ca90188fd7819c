"""The single-process 8-device baseline, in a fresh interpreter (see support/device_worker.py for
why XLA's device count needs one): run a program file with run_xla(devices=8)."""


def run_file(path: str, func: str | None, arrays: list, devices: int):
    from tilefoundry.cli.program import load_program
    from tilefoundry.exits.runtimes.xla import run_xla

    return run_xla(load_program(path).entry(func), *arrays, devices=devices)
