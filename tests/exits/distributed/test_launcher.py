"""The local launcher's guarantees (issue 16: "a worker that fails or is killed ends the whole run
within a bounded time with a clear message naming the worker; no orphan processes; no hang; a
coordinator port in use is handled").

Most cases use tiny stand-in workers (a Python one-liner) because the guarantees are the
launcher's; two use real jax workers (join_worker.py) for what only jax can show: a worker killed
while its peer waits inside a cross-process collective, and jax's own failure when the
coordinator port is taken. Every test checks afterwards that each recorded pid is gone
(`os.kill(pid, 0)` raises ProcessLookupError: the process was stopped and reaped).
"""

import os
import signal
import socket
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest

from tilefoundry.exits.runtimes.distributed import LocalLaunch, WorkerFailed, launch_local
from tilefoundry.exits.runtimes.distributed import launch as launch_module

JOIN_WORKER = str(Path(__file__).with_name("join_worker.py"))
needs_jax = pytest.mark.skipif(find_spec("jax") is None, reason="these workers run jax")


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def assert_gone(pids) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def wait_for(paths, limit_s: float = 60.0) -> None:
    deadline = time.monotonic() + limit_s
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"workers never wrote {paths}"
        time.sleep(0.05)


def test_workers_learn_their_place_and_their_devices(tmp_path):
    code = (
        "import os, pathlib; e = os.environ; pathlib.Path(e['OUT'], e['TILEFOUNDRY_PROCESS_ID'])"
        ".write_text(' '.join([e['TILEFOUNDRY_COORDINATOR_ADDRESS'], "
        "e['TILEFOUNDRY_NUM_PROCESSES'], e['TILEFOUNDRY_LOCAL_DEVICES'], e['XLA_FLAGS']]))"
    )
    env = {
        **os.environ,
        "OUT": str(tmp_path),
        "XLA_FLAGS": "--xla_force_host_platform_device_count=9",
    }
    launch = launch_local(python(code), 3, devices_per_process=2, env=env)
    for p in range(3):
        address, count, local, flags = (tmp_path / str(p)).read_text().split(" ", 3)
        assert (address, count, local) == (f"localhost:{launch.port}", "3", "2")
        assert flags == "--xla_force_host_platform_device_count=2"  # the old count replaced
    assert_gone(launch.pids)


def test_a_failing_worker_ends_the_run_and_is_named(tmp_path):
    code = (
        "import os, sys, time\n"
        "if os.environ['TILEFOUNDRY_PROCESS_ID'] == '1':\n"
        "    print('bad shard on worker one', flush=True); sys.exit(3)\n"
        "time.sleep(600)"
    )
    launch = LocalLaunch(python(code), 3, timeout_s=120, log_dir=tmp_path)
    launch.start()
    with pytest.raises(WorkerFailed) as failed:
        launch.wait()
    message = str(failed.value)
    assert f"worker 1 of 3 (pid {launch.pids[1]}) exited with status 3" in message
    assert "the other workers were stopped" in message and "bad shard on worker one" in message
    assert_gone(launch.pids)


def test_a_run_past_its_timeout_is_stopped_and_says_who_was_still_running(tmp_path):
    code = "import time; time.sleep(600)"
    launch = LocalLaunch(python(code), 2, timeout_s=0.5, log_dir=tmp_path)
    launch.start()
    with pytest.raises(WorkerFailed, match=r"did not finish within 0\.5 s; stopped worker 0 "):
        launch.wait()
    assert_gone(launch.pids)


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    launch = LocalLaunch(python(code), 1, timeout_s=0.3, grace_s=0.2, log_dir=tmp_path)
    launch.start()
    with pytest.raises(WorkerFailed, match="did not finish"):
        launch.wait()
    assert_gone(launch.pids)


def test_a_requested_port_in_use_is_replaced_by_a_free_one():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        launch = launch_local(python("pass"), 2, port=port)
    assert launch.port != port
    assert f"coordinator port {port} is in use; using {launch.port}" == launch.note
    assert_gone(launch.pids)


def test_losing_the_port_race_relaunches_on_a_fresh_port(tmp_path):
    """Process 0 reports jax's bind failure the first time only (a stand-in for another
    program taking the port between the check and the bind)."""
    code = (
        "import os, pathlib, sys\n"
        f"marker = pathlib.Path({str(tmp_path)!r}, 'lost')\n"
        "if os.environ['TILEFOUNDRY_PROCESS_ID'] == '0' and not marker.exists():\n"
        "    marker.write_text('x'); print('Failed to add port to server', flush=True)\n"
        "    sys.exit(1)\n"
    )
    starts = []
    launch = launch_local(
        python(code), 2, log_dir=tmp_path, on_start=lambda run: starts.append((run.port, run.pids))
    )
    assert [port for port, _ in starts][-1] == launch.port and len(starts) == 2
    assert starts[0][0] != starts[1][0]
    assert_gone([pid for _, pids in starts for pid in pids])


@pytest.mark.slow
@needs_jax
def test_jax_losing_the_coordinator_port_is_retried_on_another(tmp_path, monkeypatch):
    """Real jax: the busy port gets past the check (forced here), process 0 cannot bind it, the
    launcher recognises jax's failure and relaunches on a free port, where the run joins."""
    family, anywhere = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "")
    with socket.socket(family) as busy:  # where jax's coordinator binds: every interface
        busy.bind((anywhere, 0))
        busy.listen()
        port = busy.getsockname()[1]
        checks = iter([True])  # the requested port "looks free" once; real probes after that
        real = launch_module.port_is_free
        monkeypatch.setattr(launch_module, "port_is_free", lambda p: next(checks, None) or real(p))
        starts = []
        launch = launch_local(
            [sys.executable, JOIN_WORKER, "join", str(tmp_path)],
            1,  # process 0 alone hosts the coordinator: the cheapest run that binds the port
            devices_per_process=1,
            port=port,
            timeout_s=120,
            log_dir=tmp_path / "logs",
            on_start=lambda run: starts.append((run.port, run.pids)),
        )
    assert starts[0][0] == port and launch.port != port and len(starts) == 2
    assert (tmp_path / "ready0").exists()
    assert_gone([pid for _, pids in starts for pid in pids])


@pytest.mark.slow
@needs_jax
def test_killing_a_worker_mid_collective_ends_the_run_naming_it(tmp_path):
    """Real jax: both workers join; worker 0 waits in a sum over both processes' devices while
    worker 1 sleeps; killing worker 1 ends the run at once (not at the timeout)."""
    launch = LocalLaunch(
        [sys.executable, JOIN_WORKER, "collective", str(tmp_path)],
        2,
        devices_per_process=2,
        timeout_s=120,
        log_dir=tmp_path / "logs",
    )
    launch.start()
    try:
        wait_for([tmp_path / "ready0", tmp_path / "ready1"])
        os.kill(launch.pids[1], signal.SIGKILL)
        with pytest.raises(WorkerFailed) as failed:
            launch.wait()
    finally:
        launch.stop()
    assert f"worker 1 of 2 (pid {launch.pids[1]}) was killed by SIGKILL" in str(failed.value)
    assert_gone(launch.pids)


LAUNCHER = """
import signal, sys
from tilefoundry.exits.runtimes.distributed import WorkerFailed, launch_local

signal.signal(signal.SIGTERM, lambda *_: print("launcher: its own SIGTERM handler ran", flush=True))
sleepers = [sys.executable, "-c", "import time; time.sleep(600)"]
show = lambda run: print(" ".join(map(str, run.pids)), flush=True)
try:
    launch_local(sleepers, 2, on_start=show, log_dir=sys.argv[1] + "/first")
except WorkerFailed as err:
    print("launcher:", str(err).splitlines()[0], flush=True)
launch_local(sleepers, 2, on_start=show, log_dir=sys.argv[1] + "/second")
"""


def gone_or_zombie(pid: int) -> bool:
    """Dead, or dead and waiting for its (new) parent to reap it: either way not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_a_launcher_that_is_stopped_or_killed_takes_its_workers_with_it(tmp_path):
    """One launcher process, two launches. SIGTERM: the launcher stops and reaps its workers,
    then acts as before (here its own handler, which lets it go on). SIGKILL (no handler can
    run): each worker asked the kernel to kill it when its parent dies."""
    import subprocess

    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        first = [int(p) for p in launcher.stdout.readline().split()]
        launcher.send_signal(signal.SIGTERM)
        assert launcher.stdout.readline() == "launcher: its own SIGTERM handler ran\n"
        assert launcher.stdout.readline().startswith("launcher: worker 0 of 2 (pid ")
        assert_gone(first)  # stopped and reaped before the launcher went on
        second = [int(p) for p in launcher.stdout.readline().split()]
        launcher.send_signal(signal.SIGKILL)
        assert launcher.wait(timeout=60) == -signal.SIGKILL
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.monotonic() + 30
    while not all(gone_or_zombie(pid) for pid in second):
        assert time.monotonic() < deadline, "a worker outlived its launcher"
        time.sleep(0.05)


def test_of_workers_failing_together_the_one_killed_from_outside_is_named_first(tmp_path):
    """Worker 0 aborts (how jax reacts to a lost peer) and worker 1 is killed, both before the
    launcher looks: the kill is the cause, so worker 1 is named first and worker 0 after it."""
    code = (
        "import os, signal, time\n"
        "if os.environ['TILEFOUNDRY_PROCESS_ID'] == '0':\n"
        "    time.sleep(0.3); os.abort()\n"
        "time.sleep(0.3); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    launch = LocalLaunch(python(code), 2, timeout_s=60, log_dir=tmp_path)
    launch.start()
    deadline = time.monotonic() + 60
    while not all(gone_or_zombie(pid) for pid in launch.pids):  # both dead before the first poll
        assert time.monotonic() < deadline
        time.sleep(0.05)
    with pytest.raises(WorkerFailed) as failed:
        launch.wait()
    message = str(failed.value)
    assert message.startswith(f"worker 1 of 2 (pid {launch.pids[1]}) was killed by SIGKILL;")
    assert f"worker 0 (pid {launch.pids[0]}) was killed by SIGABRT too;" in message
    assert_gone(launch.pids)
