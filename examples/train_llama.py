"""Train a 2-layer Llama on 8 devices (DP x TP on a 2 x 4 mesh) with AdamW written in the DSL.

The model: a token embedding, two of examples/llama.py's decoder layers (`llama_dp_tp`: the batch
split over `dp`, Megatron tensor parallelism over `tp`), a final RMSNorm and an LM head; the loss
is the mean cross-entropy of the next token. The data is synthetic and learnable: a fixed random
cyclic sequence of PERIOD distinct tokens, each sample a window of it starting at an offset the
data RNG draws, so the next token is a function of the current one that the model memorises.
Tokens enter as one-hot rows (the embedding is a matmul with them: its gradient is another).

    python examples/train_llama.py --steps 100        # trains on 8 CPU devices, a progress bar
    python examples/train_llama.py --backend reference --steps 3   # the simulator, same program

`train_step` (the last @func) is one step: the loss, its gradients (`value_and_grad`, reduced
over `dp`), and `tilefoundry.optim.adamw`'s update of every parameter and state; so
`tilefoundry run examples/train_llama.py --backend xla --devices 8` runs one step of it. The run
checkpoints every --checkpoint-every steps (tilefoundry.training_state) and resumes from
--resume.
"""

import sys

import numpy as np

from llama import BATCH, DP_TP, EPS, FFN, HIDDEN, SEQ, llama_dp_tp
from tilefoundry import Tensor, func, optim, value_and_grad
from tilefoundry.dsl import tf
from tilefoundry.ir.types import f32, make_shard_tensor_type
from tilefoundry.ir.types.shard import B

VOCAB, PERIOD = 64, 48
LEARNING_RATE = 3e-3
LOSS_THRESHOLD, STEP_BUDGET = 0.1, 100
"""The run trains when its loss falls below LOSS_THRESHOLD within STEP_BUDGET steps."""
REPLICATED_LOSS = make_shard_tensor_type((), f32, mesh=DP_TP, attrs=(B, B)).layout


@func
def loss(
    tokens: Tensor[(BATCH @ DP_TP.dp, SEQ, VOCAB), "f32"],
    targets: Tensor[(BATCH @ DP_TP.dp, SEQ, VOCAB), "f32"],
    embed: Tensor[(VOCAB, HIDDEN), "f32"],
    attn_norm_0: Tensor[(HIDDEN,), "f32"],
    wq_0: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wk_0: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wv_0: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wo_0: Tensor[(HIDDEN @ DP_TP.tp, HIDDEN), "f32"],
    mlp_norm_0: Tensor[(HIDDEN,), "f32"],
    w_gate_0: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_up_0: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_down_0: Tensor[(FFN @ DP_TP.tp, HIDDEN), "f32"],
    attn_norm_1: Tensor[(HIDDEN,), "f32"],
    wq_1: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wk_1: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wv_1: Tensor[(HIDDEN, HIDDEN @ DP_TP.tp), "f32"],
    wo_1: Tensor[(HIDDEN @ DP_TP.tp, HIDDEN), "f32"],
    mlp_norm_1: Tensor[(HIDDEN,), "f32"],
    w_gate_1: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_up_1: Tensor[(HIDDEN, FFN @ DP_TP.tp), "f32"],
    w_down_1: Tensor[(FFN @ DP_TP.tp, HIDDEN), "f32"],
    final_norm: Tensor[(HIDDEN,), "f32"],
    head: Tensor[(HIDDEN, VOCAB), "f32"],
):
    x = tokens @ embed
    x = llama_dp_tp(x, attn_norm_0, wq_0, wk_0, wv_0, wo_0, mlp_norm_0, w_gate_0, w_up_0, w_down_0)
    x = llama_dp_tp(x, attn_norm_1, wq_1, wk_1, wv_1, wo_1, mlp_norm_1, w_gate_1, w_up_1, w_down_1)
    logits = tf.rms_norm(x, final_norm, eps=EPS) @ head
    log_total = tf.log(tf.reduce(tf.exp(logits), axes=(2,), keepdim=False, kind="sum"))
    picked = tf.reduce(logits * targets, axes=(2,), keepdim=False, kind="sum")
    mean = tf.reduce(log_total - picked, axes=(0, 1), keepdim=False, kind="mean")
    return tf.reshard(mean, layout=REPLICATED_LOSS)


PARAMETER_TYPES = tuple(p.type for p in loss.params[2:])
ADAMW = optim.adamw(
    PARAMETER_TYPES,
    learning_rate=LEARNING_RATE,
    grad_types=value_and_grad(loss, argnums=tuple(range(2, 23))).body.type.fields[1].fields,
)
train_step = optim.training_step(loss, ADAMW, data=2)
NAMES = tuple(p.name for p in loss.params[2:])
STATE_NAMES = tuple(f"{s}_{n}" for s in ADAMW.state_names for n in NAMES)
SEQUENCE = np.random.default_rng(1).permutation(VOCAB)[:PERIOD]
"""The sequence to memorise: PERIOD distinct tokens, read cyclically."""


def initial_parameters(seed: int = 0) -> dict[str, np.ndarray]:
    """Norm weights 1, matrices normal with std 1/sqrt(fan-in) (the embedding: std 1)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, type_ in zip(NAMES, PARAMETER_TYPES, strict=True):
        shape = tuple(type_.shape)
        if len(shape) == 1:
            params[name] = np.ones(shape, np.float32)
        else:
            scale = 1.0 if name == "embed" else 1.0 / np.sqrt(shape[0])
            params[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
    return params


def batch(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """BATCH windows of the cyclic sequence at offsets drawn from `rng`: one-hot tokens and the
    one-hot next tokens."""
    offsets = rng.integers(0, PERIOD, BATCH)
    window = SEQUENCE[(offsets[:, None] + np.arange(SEQ + 1)) % PERIOD]
    one_hot = np.eye(VOCAB, dtype=np.float32)[window]
    return one_hot[:, :-1], one_hot[:, 1:]


def start(seed: int = 0):
    """The training state before step 1 (tilefoundry.training_state.TrainingState)."""
    from tilefoundry.training_state import TrainingState

    arrays = {**initial_parameters(seed), **dict(zip(STATE_NAMES, ADAMW.init(), strict=True))}
    rng = np.random.default_rng(seed + 1)
    return TrainingState(arrays, step=0, data_position=0, rng=rng.bit_generator.state)


def train(state, steps: int, *, backend: str = "xla", checkpoint=None, every: int = 0,
          progress: bool = False):  # fmt: skip
    """Steps state.step+1 .. steps from `state`; returns (the final state, each step's loss).
    On XLA the parameters and optimizer state stay on the 8 devices between steps (donated);
    the reference backend runs the same program on the simulator."""
    from tilefoundry.training_state import TrainingState, save

    rng = np.random.default_rng()
    rng.bit_generator.state = state.rng
    arrays = list(state.arrays.values())
    losses = []
    if backend == "xla":
        import tilefoundry
        from tilefoundry.exits.runtimes.device_step import fetch

        step_fn = tilefoundry.jit(train_step, devices=8, donate_argnums=range(2, 2 + len(arrays)))
        tokens, targets = batch(np.random.default_rng(0))
        arrays = list(step_fn.place(tokens, targets, *arrays, np.int32(1))[2:-1])
        run = step_fn
    else:
        from tilefoundry.evaluator import evaluate

        def run(*args):
            return evaluate(train_step, *args)

        def fetch(value):
            return value

    def snapshot(count: int):
        named = dict(zip(state.arrays, fetch(tuple(arrays)), strict=True))
        return TrainingState(named, count, count * BATCH, rng.bit_generator.state)

    with _progress(progress, steps - state.step) as advance:
        for count in range(state.step + 1, steps + 1):
            tokens, targets = batch(rng)
            value, *arrays = run(tokens, targets, *arrays, np.array(count, np.int32))
            losses.append(float(fetch(value)))
            advance(losses[-1])
            if checkpoint is not None and every and count % every == 0:
                save(checkpoint, snapshot(count))
    return snapshot(steps), losses


def _progress(show: bool, total: int):
    """A rich progress bar with the loss and the step time; nothing when not shown."""
    from contextlib import contextmanager

    @contextmanager
    def bar():
        import time

        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("step {task.completed}/{task.total}"), BarColumn(),
                   TextColumn("loss {task.fields[loss]:.4f}  {task.fields[ms]:.1f} ms/step"),
                   TimeElapsedColumn())  # fmt: skip
        with Progress(*columns) as progress:
            task = progress.add_task("train", total=total, loss=float("nan"), ms=0.0)
            last = [time.perf_counter()]

            def advance(value: float) -> None:
                now = time.perf_counter()
                progress.update(task, advance=1, loss=value, ms=(now - last[0]) * 1e3)
                last[0] = now

            yield advance

    @contextmanager
    def silent():
        yield lambda value: None

    return bar() if show else silent()


def main(argv=None) -> int:
    import argparse
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEP_BUDGET)
    parser.add_argument("--backend", choices=("xla", "reference"), default="xla")
    parser.add_argument("--checkpoint", default=None, help="checkpoint file (.npz)")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--resume", action="store_true", help="start from --checkpoint")
    args = parser.parse_args(argv)
    if args.backend == "xla" and "jax" not in sys.modules:  # 8 CPU devices unless set
        flags = os.environ.get("XLA_FLAGS", "")
        if "device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8"
    if args.resume:
        from tilefoundry.training_state import restore

        state = restore(args.checkpoint)
    else:
        state = start()
    state, losses = train(state, args.steps, backend=args.backend, checkpoint=args.checkpoint,
                          every=args.checkpoint_every, progress=True)  # fmt: skip
    below = next((i for i, v in enumerate(losses, start=1) if v < LOSS_THRESHOLD), None)
    print(f"final loss {losses[-1]:.4f} after step {state.step}; first below "
          f"{LOSS_THRESHOLD} at step {below}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
