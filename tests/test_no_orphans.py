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
    Path(os.environ["HOLD_PIDS"]).write_text(" ".join(map(str, pids)))
    time.sleep(600)

def _ppid(proc):
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
'''


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for init to reap it is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["one-process", "xdist"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=["SIGKILL", "SIGTERM", "Ctrl-C"])
def test_a_killed_run_leaves_no_redis_collector_or_nginx_running(tmp_path: Path, sig: int,
                                                                 workers: list[str]) -> None:
    """Under pytest-xdist (./dev test) the signal goes to the controller: its worker, which
    started the servers, must die too, and they with it. Ctrl-C is SIGINT to the terminal's
    foreground process group: the run gets a group of its own, and the whole group the
    signal (the collector and nginx, in sessions of their own, get none)."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_hold.py").write_text(HOLDING_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    pids_file = tmp_path / "pids"
    pids: list[int] = []
    env = {**os.environ, "HOLD_PIDS": str(pids_file), "PYTHONPATH": str(ROOT)}
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                *workers, str(tmp_path / "test_hold.py")],
                               cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not pids_file.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_file.exists(), f"the held run never started: {log.read_text()[-2000:]}"
        time.sleep(0.2)  # the file is written in one call; let it be complete
        pids.extend(int(p) for p in pids_file.read_text().split())
        assert len(pids) >= 7  # pytest (or its xdist worker), redis-server, gunicorn and its 2
        # workers, nginx and its worker
        assert all(alive(pid) for pid in pids)
        if sig == signal.SIGINT:
            os.killpg(run.pid, sig)
        else:
            run.send_signal(sig)
        run.wait(timeout=30)
        deadline = time.monotonic() + 30  # gunicorn's graceful stop; seconds under load
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in pids if alive(pid)] == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in pids:  # a failed run's survivors: stop them here, not never
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
