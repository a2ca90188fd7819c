"""The `tilefoundry` command.

`tilefoundry demo` walks through what the compiler knows today, on the embedded default (no
server, no GPU): the CuTe layout algebra and the seed's sharded-layout example, with every figure
computed by the library.
"""

from __future__ import annotations

import argparse
import sys


def _demo() -> int:
    from tilefoundry.demo import run_demo

    run_demo(sys.stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tilefoundry", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="show the layout algebra and a sharded layout, computed")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo()
    parser.error(f"unknown command {args.command!r}")
    return 2
