"""The programs every multi-process test runs: one row per program, so a new example joins the
whole suite (2 x 4 and 4 x 2 processes, same module, same collectives, same numbers) by adding
one `Case`.

The TP Llama layer (examples/llama.py) joins as one row when it lands:
    Case("llama_tp_layer", "examples/llama.py"),
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilefoundry.cli.program import load_program, random_inputs

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Case:
    name: str
    file: str
    func: str | None = None
    seed: int = 0
    reordering: float = 8 * float(np.finfo(np.float32).eps)
    """Normwise bound on |multi-process - one-process| / max(1, max |one-process|): the two
    differ only in the order an all-reduce adds its addends (gloo across processes, XLA's own
    in one). 8 eps covers one sum of 8 f32 addends; a program with many reductions feeding
    nonlinearities may need more (say why in its row)."""

    @property
    def path(self) -> str:
        return str(REPO / self.file)

    def function(self):
        return load_program(self.path).entry(self.func)

    def inputs(self) -> list[np.ndarray]:
        return random_inputs(self.function(), {}, np.random.default_rng(self.seed))


CASES = (Case("megatron_mlp", "examples/megatron_mlp.py"),)
SPLITS = ((2, 4), (4, 2))
"""(processes, devices per process): the 8-device mesh split across hosts two ways."""
