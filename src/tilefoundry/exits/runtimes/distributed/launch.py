"""Launching a multi-process run on this machine: P worker processes and a coordinator port.

This is the single-machine stand-in for a cluster launcher (srun, ssh, a Kubernetes job): it
starts P copies of a worker command, each told its place through the environment
(`config.ADDRESS`, `PROCESSES`, `PROCESS_ID`, `LOCAL_DEVICES`) and given its share of host
devices through XLA_FLAGS. Process 0 hosts the coordinator on a free localhost port.

What it guarantees, because a multi-process run otherwise fails by hanging:
- a worker that exits non-zero or is killed ends the whole run at once: the others are stopped
  and `WorkerFailed` names the worker, its pid, how it ended and the tail of its log;
- a run still going after `timeout_s` is stopped and `WorkerFailed` names who was still running;
- no orphans: each worker leads its own process group (stopped with SIGTERM, then SIGKILL after
  a grace period, then reaped), asks the kernel to kill it if the launcher dies
  (PR_SET_PDEATHSIG on Linux: "dies" is the launching *thread* ending, so start and wait in a
  thread that outlives the run), and live launches are stopped at interpreter exit and on
  SIGTERM/SIGHUP;
- a coordinator port in use is never fatal: a requested port that is busy is replaced by a free
  one, and if process 0 still cannot bind (another program took the port between the check and
  the bind) the run is relaunched on a fresh port, up to `port_attempts` times.

Nothing here imports jax.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tilefoundry.errors import EvalError
from tilefoundry.exits.runtimes.distributed.config import (
    ADDRESS,
    HOST_DEVICE_FLAG,
    LOCAL_DEVICES,
    PROCESS_ID,
    PROCESSES,
)

GRACE_S = 2.0
"""How long a stopped worker gets between SIGTERM and SIGKILL."""
POLL_S = 0.05
PORT_IN_USE_MARKERS = (
    "Failed to add port to server",  # grpc, when jax's coordinator cannot bind
    "Failed to start RPC server",  # jax's exception that follows it
    "Address already in use",
)
_LIVE: set[LocalLaunch] = set()


class WorkerFailed(EvalError):
    """A worker of a multi-process run failed, was killed, or the run timed out."""


class CoordinatorPortInUse(WorkerFailed):
    """Process 0 could not bind the coordinator port."""


@dataclass(frozen=True)
class Worker:
    process_id: int
    pid: int
    log: Path


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` on every interface (the coordinator binds
    `[::]:port`, so a listener on either family makes the port unusable)."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((host, port))
        except OSError as err:
            if family == socket.AF_INET6 and not socket.has_ipv6:
                continue
            if err.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):  # no such family here
                continue
            return False
    return True


def free_port(avoid: Collection[int] = ()) -> int:
    """A port nothing listens on now and not in `avoid` (ports that already failed); the kernel
    picks it, and the caller still races other programs for it."""
    for _ in range(20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        if port not in avoid and port_is_free(port):
            return port
    raise WorkerFailed("launch: found no free localhost port for the coordinator")


def worker_env(
    base: Mapping[str, str], port: int, processes: int, process_id: int, devices: int
) -> dict[str, str]:
    """The environment of worker `process_id`: its place in the run and `devices` host devices
    (any device-count flag already in XLA_FLAGS is replaced); CPU unless JAX_PLATFORMS says."""
    env = dict(base)
    flags = HOST_DEVICE_FLAG.sub("", env.get("XLA_FLAGS", "")).split()
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env[ADDRESS] = f"localhost:{port}"
    env[PROCESSES] = str(processes)
    env[PROCESS_ID] = str(process_id)
    env[LOCAL_DEVICES] = str(devices)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _die_with_parent(parent: int) -> Callable[[], None] | None:
    """What the child runs before exec (Linux): be killed when the launcher dies, so a launcher
    killed by SIGKILL leaves no orphans either; a launcher that died before this ran already
    counts. libc is resolved here, in the parent: the child, forked from a process that may run
    threads, only calls a resolved function (no loading, no imports) before exec."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def arm() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os._exit(1)

    return arm


class LocalLaunch:
    """P workers on this machine; `start()`, then `wait()` (which always stops them)."""

    def __init__(
        self,
        argv: Sequence[str],
        processes: int,
        *,
        devices_per_process: int = 1,
        port: int | None = None,
        timeout_s: float = 300.0,
        env: Mapping[str, str] | None = None,
        log_dir: str | os.PathLike | None = None,
        avoid_ports: Collection[int] = (),
        grace_s: float = GRACE_S,
    ):
        if processes < 1:
            raise WorkerFailed(f"launch: processes={processes}; needs >= 1")
        self.argv, self.processes = list(argv), processes
        self.devices_per_process, self.timeout_s = devices_per_process, timeout_s
        self.grace_s = grace_s
        self.env = dict(os.environ if env is None else env)
        self.requested_port, self.avoid_ports = port, frozenset(avoid_ports)
        self.port: int | None = None
        self.note = ""
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="tilefoundry-workers-"))
        self._owns_log_dir = log_dir is None  # removed after a good run, kept after a failure
        self.workers: list[Worker] = []
        self._popens: list[subprocess.Popen] = []
        self._restore_signals: Callable[[], None] = lambda: None

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def _pick_port(self) -> int:
        if self.requested_port is not None and self.port is None:
            if port_is_free(self.requested_port):
                return self.requested_port
            chosen = free_port(self.avoid_ports | {self.requested_port})
            self.note = f"coordinator port {self.requested_port} is in use; using {chosen}"
            return chosen
        return free_port(self.avoid_ports)

    def start(self) -> list[Worker]:
        self.port = self._pick_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _LIVE.add(self)
        self._restore_signals = _stop_on_signals()
        preexec = _die_with_parent(os.getpid())
        for p in range(self.processes):
            log = self.log_dir / f"worker{p}.log"
            env = worker_env(self.env, self.port, self.processes, p, self.devices_per_process)
            with open(log, "wb") as sink:
                popen = subprocess.Popen(
                    self.argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            self._popens.append(popen)
            self.workers.append(Worker(p, popen.pid, log))
        return self.workers

    def wait(self) -> None:
        """Block until every worker succeeded; else stop them all and raise WorkerFailed."""
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                codes = [p.poll() for p in self._popens]
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    raise self._failure(failed, codes)
                if all(c == 0 for c in codes):
                    if self._owns_log_dir:
                        shutil.rmtree(self.log_dir, ignore_errors=True)
                    return
                if time.monotonic() > deadline:
                    raise self._timeout([i for i, c in enumerate(codes) if c is None])
                time.sleep(POLL_S)
        finally:
            self.stop()

    def stop(self) -> None:
        """SIGTERM every live worker's process group, SIGKILL what is left after `grace_s`, reap
        all. Only groups whose leader is not yet reaped are signalled: an unreaped leader (alive
        or a zombie) keeps its id from being reused, so the signal cannot reach a stranger."""
        live = [p for p in self._popens if p.poll() is None]
        for popen in live:
            _signal_group(popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for popen in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(max(0.0, deadline - time.monotonic()))
        for popen in live:
            if popen.poll() is None:
                _signal_group(popen.pid, signal.SIGKILL)
            popen.wait()
        _LIVE.discard(self)
        self._restore_signals()
        self._restore_signals = lambda: None

    def _failure(self, failed: list[int], codes: list[int | None]) -> WorkerFailed:
        """Name the worker that failed first. Workers seen failing in the same poll are ordered
        cause before consequence: a worker killed from outside (any signal but SIGABRT) before
        one that aborted or exited non-zero, which is how jax reacts to a lost peer."""
        failed = sorted(failed, key=lambda i: (not _killed_from_outside(codes[i]), i))
        index, worker = failed[0], self.workers[failed[0]]
        tail = log_tail(worker.log)
        kind = WorkerFailed
        if index == 0 and any(m in _read(worker.log) for m in PORT_IN_USE_MARKERS):
            kind = CoordinatorPortInUse
        also = "".join(
            f" worker {i} (pid {self.workers[i].pid}) {_how(codes[i])} too;" for i in failed[1:]
        )
        return kind(
            f"worker {worker.process_id} of {self.processes} (pid {worker.pid}) "
            f"{_how(codes[index])};{also} the other workers were stopped. Its log "
            f"({worker.log}) ends:\n{_indent(tail)}"
        )

    def _timeout(self, running: list[int]) -> WorkerFailed:
        who = ", ".join(f"worker {i} (pid {self.workers[i].pid})" for i in running)
        return WorkerFailed(
            f"the run did not finish within {self.timeout_s:g} s; stopped {who}. A worker "
            "waiting forever usually means another never reached the same collective; the logs "
            f"are in {self.log_dir}"
        )


def launch_local(
    argv: Sequence[str],
    processes: int,
    *,
    devices_per_process: int = 1,
    port: int | None = None,
    timeout_s: float = 300.0,
    env: Mapping[str, str] | None = None,
    log_dir: str | os.PathLike | None = None,
    port_attempts: int = 3,
    on_start: Callable[[LocalLaunch], None] | None = None,
) -> LocalLaunch:
    """Run P workers to completion (LocalLaunch.wait's guarantees); relaunch on a fresh port when
    process 0 could not bind the coordinator's. Returns the finished launch (its port, logs and
    note); raises WorkerFailed."""
    failed_ports: set[int] = set()
    for attempt in range(1, port_attempts + 1):
        launch = LocalLaunch(
            argv,
            processes,
            devices_per_process=devices_per_process,
            port=port if attempt == 1 else None,
            timeout_s=timeout_s,
            env=env,
            log_dir=Path(log_dir) / f"attempt{attempt}" if log_dir else None,
            avoid_ports=failed_ports,
        )
        launch.start()
        if on_start is not None:
            on_start(launch)
        try:
            launch.wait()
            return launch
        except CoordinatorPortInUse:
            failed_ports.add(launch.port)
            if attempt == port_attempts:
                raise
    raise AssertionError("unreachable")


def _how(code: int) -> str:
    if code < 0 and -code in signal.valid_signals():
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _killed_from_outside(code: int) -> bool:
    return code < 0 and -code != signal.SIGABRT


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def log_tail(path: Path, lines: int = 12) -> str:
    """The last lines of a worker log that say something (gloo's connection chatter dropped)."""
    text = _read(path)
    if not text:
        return "(empty log)"
    kept = [line for line in text.splitlines() if line.strip() and "[Gloo]" not in line]
    return "\n".join(kept[-lines:]) or "(empty log)"


def _indent(text: str) -> str:
    return "\n".join(f"  | {line}" for line in text.splitlines())


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _stop_all() -> None:
    for launch in list(_LIVE):
        launch.stop()


atexit.register(_stop_all)


def _stop_on_signals() -> Callable[[], None]:
    """From before the first worker starts until the launch is stopped, in the main thread:
    SIGTERM/SIGHUP stop every live launch, then act as before (Ctrl-C raises
    KeyboardInterrupt, which `wait`'s `finally` handles). Returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}

    def handler(signum, frame):
        _stop_all()
        signal.signal(signum, previous[signum] or signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
