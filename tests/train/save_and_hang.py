"""`python save_and_hang.py PATH READY`: save checkpoint step 1 at PATH, then start saving step 2
over it and stop inside that save, after the new file's bytes are written and before the rename
(the `os.fsync` of the CLI's output writer), touching READY so the test can SIGKILL this process
there: the moment a crash would leave a half-finished save."""

import os
import sys
import time
from pathlib import Path

import numpy as np

from tilefoundry import training_state


def main(path: str, ready: str) -> int:
    weights = np.arange(1 << 16, dtype=np.float32)
    training_state.save(path, training_state.TrainingState({"w": weights}, step=1))

    def hang(fd: int) -> None:
        Path(ready).write_text("in the save")
        time.sleep(3600)

    os.fsync = hang
    training_state.save(path, training_state.TrainingState({"w": weights + 1}, step=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
