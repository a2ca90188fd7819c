"""Step time of examples/train_llama.py on 8 CPU devices: our compiled step vs the JAX + optax
peer (benchmarks/train_llama_jax.py), ratio of medians in one run (issue 26).

Both sides are a whole training step — forward, backward, the gradients' all-reduces over `dp`,
AdamW — on state that stays on the devices: ours is `tilefoundry.jit(train_step, devices=8)`
with the parameters and optimizer state donated, JAX's is `jax.jit` of `value_and_grad` +
`optax.adamw` with the same NamedShardings and its state donated too. Each
sample is one step on the batch placed before the timing, ending when its loss is on the host;
compilation is excluded (the first step of each side compiles and is warm-up). Before timing,
both sides' first steps are checked to agree.

Run: `python benchmarks/train_step.py` (it asks XLA for 8 CPU devices before jax starts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = (
    f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8".strip()
)
sys.path.insert(0, str(Path(__file__).parent))

from _timing import (
    interleaved_medians,
    markdown_table,
    repeats_for,
    standard_arguments,
    write_results,
)
from train_llama_jax import example, jax_step


def main() -> int:
    args = standard_arguments(__doc__.splitlines()[0]).parse_args()
    repeats = repeats_for(args, 200)
    import jax
    import numpy as np

    import tilefoundry

    model = example()
    start = model.start()
    rng = np.random.default_rng(0)
    tokens, targets = model.batch(rng)

    ours_step = tilefoundry.jit(model.train_step, devices=8, donate_argnums=range(2, 65))
    placed = ours_step.place(tokens, targets, *start.arrays.values(), np.int32(1))
    data, state, count = placed[:2], [list(placed[2:-1])], placed[-1]

    def ours() -> float:
        loss, *state[0] = ours_step(*data, *state[0], count)
        return float(loss)

    step, params, opt_state, sharding = jax_step()
    peer_data = tuple(jax.device_put(a, sharding) for a in (tokens, targets))
    peer_state = [params, opt_state]

    def peer() -> float:
        loss, peer_state[0], peer_state[1] = step(*peer_state, *peer_data)
        return float(loss)

    first = ours(), peer()  # the same first step from the same state: the same loss
    if not np.isclose(*first, rtol=1e-5):
        raise SystemExit(f"the first steps disagree: loss {first[0]} vs JAX's {first[1]}")
    ours_ms, peer_ms = (t * 1e3 for t in interleaved_medians(ours, peer, repeats))
    rows = [["train_llama step (2x4 dp x tp, 8 CPU devices)", f"{ours_ms:.2f}", f"{peer_ms:.2f}",
             f"{ours_ms / peer_ms:.2f}x"]]  # fmt: skip
    print(markdown_table(["program", "tilefoundry ms", "jax + optax ms", "ratio"], rows))
    payload = {"rows": [dict(zip(("program", "ours_ms", "jax_ms", "ratio"), r, strict=True))
                        for r in rows], "repeats": repeats}  # fmt: skip
    print(f"results: {write_results(args.out, 'train_step', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
