"""A worker that joins a multi-process run and then misbehaves on purpose (launcher tests).

`python join_worker.py MODE READY_DIR`, started by `launch_local`/`LocalLaunch` (the environment
says which process it is). Every mode first joins the run (jax.distributed, gloo) and writes
READY_DIR/ready<p>. Modes:
- `collective`: process 0 enters a sum over all processes' devices; the others sleep, so
  process 0 blocks inside the collective until the test kills a sleeper;
- `join`: join with jax's own `jax.distributed.initialize` (as a user whose cluster jax detects
  would), then check that ours accepts the joined run and reads this process's place from it;
  exit 0.
"""

import sys
import time
from pathlib import Path


def main(mode: str, ready_dir: str) -> int:
    import jax

    from tilefoundry.exits.distributed import config_from_environment, initialize
    from tilefoundry.exits.distributed.runtime import _this_process

    config = config_from_environment()
    if mode == "join":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            config.coordinator_address, config.num_processes, config.process_id
        )
        place = _this_process()
        assert (place.num_processes, place.process_id) == (config.num_processes, config.process_id)
    initialize(config, timeout_s=60)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    Path(ready_dir, f"ready{config.process_id}").write_text("joined")
    if mode == "join":
        return 0
    if config.process_id != 0:
        time.sleep(3600)
        return 0
    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharding = NamedSharding(mesh, PartitionSpec("d"))
    ones = jax.make_array_from_callback(
        (len(jax.devices()),), sharding, lambda index: np.ones(1, np.float32)
    )
    print(float(jax.jit(lambda a: a.sum())(ones)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
