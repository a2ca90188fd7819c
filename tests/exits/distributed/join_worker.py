"""A worker that joins a multi-process run and then misbehaves on purpose (launcher tests).

`python join_worker.py MODE READY_DIR`, started by `launch_local`/`LocalLaunch` (the environment
says which process it is). It joins with jax's own `jax.distributed.initialize` (as a user whose
cluster jax detects would) and writes READY_DIR/ready<p>. Modes:
- `join`: exit 0; imports nothing of tilefoundry, so a launch attempt costs one jax start-up;
- `collective`: first check that tilefoundry accepts the run joined this way and reads this
  process's place from it; then process 0 enters a sum over all processes' devices while the
  others sleep, so process 0 blocks inside the collective until the test kills a sleeper.
"""

import os
import sys
import time
from pathlib import Path


def main(mode: str, ready_dir: str) -> int:
    import jax

    count = int(os.environ["TILEFOUNDRY_NUM_PROCESSES"])
    index = int(os.environ["TILEFOUNDRY_PROCESS_ID"])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(os.environ["TILEFOUNDRY_COORDINATOR_ADDRESS"], count, index)
    if mode == "collective":
        from tilefoundry.exits.runtimes.distributed import config_from_environment, initialize
        from tilefoundry.exits.runtimes.distributed.runtime import _this_process

        place = _this_process()
        assert (place.num_processes, place.process_id) == (count, index)
        initialize(config_from_environment())  # accepts the run already joined
    Path(ready_dir, f"ready{index}").write_text("joined")
    if mode == "join":
        return 0
    if index != 0:
        time.sleep(3600)
        return 0
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d"))
    ones = jax.make_array_from_callback(
        (len(jax.devices()),), sharding, lambda index: np.ones(1, np.float32)
    )
    print(float(jax.jit(lambda a: a.sum())(ones)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
