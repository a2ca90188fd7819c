"""The device-resident step's checks that need 8 XLA devices (issue 26 item 1), run by name in
the session's 8-device worker and, as a script, by each process of a 2-process run
(`python device_step_checks.py OUT_DIR`, started by `launch_local`), which also saves and
restores a checkpoint in per-process files (item 6).

Each runs `accumulation_programs.pending_step` (one SGD step of a data-parallel MLP: replicated
weights, batch split over `dp`) for STEPS steps on placed arrays, donating the weights, inside
`jax.transfer_guard("disallow")` — any host transfer, of a parameter or of anything else, raises
there — and reports what a test compares with the float64 numpy steps.
"""

import sys
from pathlib import Path

STEPS = 3


def resident_steps() -> dict:
    """The steps on 8 devices of this process: final weights, whether each donated input was
    deleted, whether every later step writes its weights into the first step's result buffers
    (a placed array may borrow its numpy array's memory, which XLA copies out of once), and the
    shardings the weights were placed and returned with."""
    import jax

    from tilefoundry import jit
    from tilefoundry.exits.runtimes.device_step import fetch
    from train import accumulation_programs as programs

    step = jit(programs.pending_step, devices=8, donate_argnums=(2, 3))
    x, y, w1, w2 = step.place(*programs.inputs())
    donated, reused, buffers = [], [], None
    with jax.transfer_guard("disallow"):
        for _ in range(STEPS):
            before = (w1, w2)
            w1, w2 = step(x, y, w1, w2)
            donated.append(all(w.is_deleted() for w in before))
            buffers = buffers or _buffers(w1) + _buffers(w2)
            reused.append(_buffers(w1) + _buffers(w2) == buffers)
    return {
        "weights": fetch((w1, w2)),
        "donated": donated,
        "reused": reused,
        "placed": [str(s.spec) for s in step.in_shardings(x, y, w1, w2)],
        "returned": [str(w.sharding.spec) for w in (w1, w2)],
    }


def _buffers(array) -> list[int]:
    return [shard.data.unsafe_buffer_pointer() for shard in array.addressable_shards]


def checkpoint_round_trip(path: Path) -> bool:
    """Save the placed inputs (x split over dp: each process holds half its rows; w1
    replicated), each process its own file of its blocks, restore them onto the same shardings:
    equal to what was saved."""
    import numpy as np

    from tilefoundry import jit, training_state
    from tilefoundry.exits.runtimes.device_step import fetch
    from train import accumulation_programs as programs

    step = jit(programs.pending_step, devices=8)
    x, _, w1, _ = step.place(*programs.inputs())
    saved = training_state.TrainingState({"x": x, "w1": w1}, step=STEPS, data_position=5)
    training_state.save(path, saved)
    back = training_state.restore(path, shardings={"x": x.sharding, "w1": w1.sharding})
    same = all(
        np.array_equal(fetch(back.arrays[name]), fetch(array))
        for name, array in saved.arrays.items()
    )
    return same and (back.step, back.data_position) == (STEPS, 5)


def main(out_dir: str) -> int:
    """One process of a multi-process run: join it, take the steps, round-trip a checkpoint;
    process 0 writes the gathered weights and the flags (every process gathers: `fetch` is
    collective across processes)."""
    import numpy as np

    from tilefoundry.exits.runtimes.distributed import config_from_environment, initialize

    initialize(config_from_environment())
    import jax

    found = resident_steps()
    restored = checkpoint_round_trip(Path(out_dir, "ckpt.npz"))
    if jax.process_index() == 0:
        w1, w2 = found["weights"]
        flags = np.array([*found["donated"], *found["reused"], restored])
        np.savez(Path(out_dir, "steps.npz"), w1=w1, w2=w2, flags=flags)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main(*sys.argv[1:]))
