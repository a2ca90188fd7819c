"""The programs every multi-process test runs: one row per program, so a new example joins the
whole suite (2 x 4 and 4 x 2 processes, same module, same collectives, same numbers) by adding
one `Case`.

Each split is a launch of fresh processes (about 10-20 s on the shared 2-core machine), so a row
may run fewer splits: `mesh_2d` adds what the Megatron MLP cannot show (a 2-D mesh, an
all-reduce whose groups stay inside each process, a Split result gathered across processes)
at 2 x 4 only.
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
    splits: tuple[tuple[int, int], ...] = ((2, 4), (4, 2))
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


SPLITS = ((2, 4), (4, 2))
"""(processes, devices per process): the 8-device mesh split across hosts two ways."""

CASES = (
    Case("megatron_mlp", "examples/megatron_mlp.py"),
    Case("mesh_2d", "examples/mesh_2d.py", splits=((2, 4),)),
    Case("llama_tp_layer", "examples/llama.py"),  # issue 16: the TP Llama layer, both splits
)
RUNS = tuple((case, split) for case in CASES for split in case.splits)
