"""Apps killed with SIGKILL: what the queue file holds afterwards, read by the next start.

The app is a real child process (tests/client/reporter_child.py) reporting from threads; it
prints how many ``report()`` calls had returned, and when, so the test can hold the queue to
the documented bounds.
"""
from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import requests

from deniable.client import Privacy, Reporter
from deniable.client.queue import DurableQueue
from deniable.core import keys
from tests.e2e.test_pipeline import counters

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing listens, so nothing leaves
METRICS = {"feature_x_enabled": "rr:1/2:1/2", "dark_mode": "rr:3/4:1/2"}


class Child:
    """A reporter_child process whose progress lines are read as they come."""

    def __init__(self, url: str, queue: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.client.reporter_child", url, str(queue), *args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=Path(__file__).resolve().parents[2])
        self.progress: list[tuple[int, float]] = []

    def read_until(self, count: int, timeout: float = 30.0) -> None:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while not self.progress or self.progress[-1][0] < count:
            assert time.monotonic() < deadline, "the child made no progress"
            line = self.process.stdout.readline()
            assert line, f"the child exited early with {self.process.poll()}"
            if line.startswith("progress"):
                _, n, t = line.split()
                self.progress.append((int(n), float(t)))

    def kill(self) -> float:
        """SIGKILL the child; return the monotonic time just before the signal."""
        killed_at = time.monotonic()
        self.process.send_signal(signal.SIGKILL)
        assert self.process.stdout is not None
        for line in self.process.stdout:  # lines written before the kill still count
            if line.startswith("progress"):
                _, n, t = line.split()
                self.progress.append((int(n), float(t)))
        self.process.stdout.close()
        self.process.wait()
        return killed_at

    def finish(self, timeout: float = 60.0) -> list[str]:
        out, _ = self.process.communicate(timeout=timeout)
        assert self.process.returncode == 0
        return out.splitlines()


def handed_over(queue_path: Path) -> int:
    queue = DurableQueue(queue_path)
    try:
        return sum(e.handed_n for e in queue.ledger().values())
    finally:
        queue.close()


def test_sync_mode_loses_nothing_when_the_app_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    child = Child(UNREACHABLE, path, "--reports", "100000", "--threads", "4",
                  "--durability", "sync", "--every", "1")
    child.read_until(1_500)
    child.kill()
    returned = child.progress[-1][0]  # report() calls known to have returned
    committed = handed_over(path)
    # Every returned call is in the file; at most one call per thread was mid-commit.
    assert returned <= committed <= returned + 4


def test_group_commit_loses_at_most_the_commit_window(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    window = 0.05  # the default commit_interval
    child = Child(UNREACHABLE, path, "--reports", "1000000", "--threads", "2",
                  "--every", "50", "--pause", "0.005")
    child.read_until(1)
    started = child.progress[0][1]
    while child.progress[-1][1] - started < 1.0:  # report for a second, then kill
        child.read_until(child.progress[-1][0] + 1)
    killed_at = child.kill()
    committed = handed_over(path)
    # Scheduling on a loaded 2-core CI machine may delay the committer thread: 0.25 s slack.
    safe = max(n for n, t in child.progress if t <= killed_at - window - 0.25)
    assert committed >= safe
    assert committed <= child.progress[-1][0] + 2 * 50  # never more than was handed over


def sealed_batches(path: Path) -> list[tuple[str, bytes]]:
    """The sealed batches in the file, oldest first, read without touching them."""
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT batch_id, body FROM batches ORDER BY seq").fetchall()
    db.close()
    return [(r[0], bytes(r[1])) for r in rows]


def test_a_restarted_app_resends_the_same_batch_ids_and_each_counts_once(
        live_collector, redis_client: redis.Redis, tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    child = Child(UNREACHABLE, path, "--reports", "100000", "--threads", "2",
                  "--durability", "sync", "--every", "10", "--batch-size", "50")
    child.read_until(400)
    child.kill()
    sealed = sealed_batches(path)
    assert len(sealed) >= 7
    # The killed app had POSTed its first batch, and died before it could record the 2xx.
    first_id, first_body = sealed[0]
    answer = requests.post(f"{live_collector.url}/v1/reports", data=first_body, timeout=5,
                           headers={"Content-Type": "application/json"})
    assert answer.status_code == 202
    # The restarted app sends every sealed batch under its stored id, the first one again.
    with Reporter(live_collector.url, privacy=Privacy(one_per_period=False),
                  metrics=METRICS, queue_path=path) as reporter:
        assert reporter.flush(timeout=20) is True
        ledger = reporter.ledger()
        stats = reporter.stats()
    for batch_id, _ in sealed:
        assert redis_client.exists(keys.batch(batch_id))
    handed = {m: (e.handed_n, e.handed_ones) for m, e in ledger.items()}
    assert counters(redis_client) == handed  # the re-sent first batch counted once
    assert stats.sent == sum(n for n, _ in handed.values()) and stats.queued == 0
