"""Running threads so that a race, if there is one, shows: all start together (a barrier) and
CPython switches between them as often as it can (the smallest switch interval)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable


def run_together(work: Callable[[int], None], count: int) -> list[BaseException]:
    """`work(0)` ... `work(count - 1)` in `count` threads at once; the exceptions they raised."""
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as err:
            errors.append(err)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    return errors
