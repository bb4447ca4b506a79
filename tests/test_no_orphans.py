"""A killed test run leaves no server behind: the redis-server, the collector (gunicorn master)
and its workers, and an nginx and its worker, that a test run started all die with the pytest
process, even when it dies by SIGKILL or SIGTERM and runs no cleanup
(collector.embedded.die_with_parent), and when Ctrl-C (SIGINT to the run's process group)
stops it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="PR_SET_PDEATHSIG is Linux only")]

HOLDING_TEST = '''
import os, time
from pathlib import Path
from tests.nginx_kit import pod_nginx

def test_hold(redis_server, live_collector, tmp_path):
    nginx, _ = pod_nginx(tmp_path / "nginx", live_collector.port)
    nginx.start()
    masters = [live_collector.process.pid, nginx.process.pid]
    workers = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
               and _ppid(p) in masters]
    pids = [os.getpid(), redis_server.process.pid, *masters, *workers]
    ready = Path(os.environ["HOLD_PIDS"])
    ready.with_suffix(".part").write_text(" ".join(map(str, pids)))
    ready.with_suffix(".part").rename(ready)  # whole or absent: the readiness signal
    time.sleep(600)

def _ppid(proc):
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
'''

SIGNALS = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "Ctrl-C": signal.SIGINT}
MODES = {"one-process": [], "xdist": ["-n", "1"]}


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for init to reap it is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def started_at(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none: with
    the pid, who it is. Pids are reused (32,768 of them here, and the suite starts thousands of
    processes), so a pid alone may name another test's server by the end of a run."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class HeldRun:
    """A pytest run (in a process group of its own) holding a redis-server, a collector and
    an nginx until it is killed."""

    process: subprocess.Popen[bytes]
    pids_file: Path
    log: Path
    # pid -> when it started, taken as soon as the pids are read: what stop() may kill.
    held: dict[int, int | None] = field(default_factory=dict)

    def pids(self) -> list[int]:
        """The held run's processes, from its pids file; who they are is noted at once."""
        pids = [int(p) for p in self.pids_file.read_text().split()]
        for pid in pids:
            self.held.setdefault(pid, started_at(pid))
        return pids

    def survivors(self) -> list[int]:
        """The held processes still running: alive, and not another process under a pid that
        one of them left."""
        return [pid for pid in self.pids()
                if alive(pid) and self.held[pid] is not None and started_at(pid) == self.held[pid]]

    @classmethod
    def start(cls, root: Path, workers: list[str]) -> HeldRun:
        (root / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
        (root / "test_hold.py").write_text(HOLDING_TEST)
        (root / "pytest.ini").write_text("[pytest]\n")
        pids_file, log = root / "pids", root / "run.log"
        env = {**os.environ, "HOLD_PIDS": str(pids_file), "PYTHONPATH": str(ROOT)}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers,
                 str(root / "test_hold.py")], cwd=root, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return cls(process, pids_file, log)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.pids_file.exists():  # a failed test's survivors: stop them here, not never,
            for pid in self.survivors():  # never one that took a dead one's pid since
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def held_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, HeldRun]]:
    """One held run per signal and mode, all started at once: each start (pytest, Redis,
    gunicorn, nginx) mostly waits, so the six overlap, and each test waits only for its own."""
    runs: dict[str, HeldRun] = {}
    try:
        for sig in SIGNALS:
            for mode, workers in MODES.items():
                runs[f"{sig}-{mode}"] = HeldRun.start(
                    tmp_path_factory.mktemp(f"held-{sig}-{mode}"), workers)
        yield runs
    finally:
        for run in runs.values():
            run.stop()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sig_name", SIGNALS)
def test_a_killed_run_leaves_no_redis_collector_or_nginx_running(
        held_runs: dict[str, HeldRun], sig_name: str, mode: str) -> None:
    """Under pytest-xdist (./dev test) the signal goes to the controller: its worker, which
    started the servers, must die too, and they with it (execnet stops a worker whose
    controller is gone after 5 s). Ctrl-C is SIGINT to the terminal's foreground process
    group: the run gets a group of its own, and the whole group the signal (the collector and
    nginx, in sessions of their own, get none)."""
    held, sig = held_runs[f"{sig_name}-{mode}"], SIGNALS[sig_name]
    run = held.process
    deadline = time.monotonic() + 120  # six runs start at once; seconds each under load
    while not held.pids_file.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.pids_file.exists(), f"the held run never started: {held.log.read_text()[-2000:]}"
    pids = held.pids()
    assert len(pids) >= 7  # pytest (or its xdist worker), redis-server, gunicorn and its 2
    # workers, nginx and its worker
    assert all(alive(pid) for pid in pids)
    if sig == signal.SIGINT:
        os.killpg(run.pid, sig)
    else:
        run.send_signal(sig)
    run.wait(timeout=30)
    deadline = time.monotonic() + 30  # gunicorn's graceful stop; seconds under load
    while held.survivors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert held.survivors() == []
