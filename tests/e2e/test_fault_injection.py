"""Nothing lost, nothing counted twice, while everything real fails in turn.

A real app process reports 20,000 values from 4 threads through the real client (sync
durability, a queue file) to a real collector (gunicorn) in front of a real Redis with an
append-only file. Meanwhile the test:

1. SIGKILLs the collector (all its workers) and restarts it on the same port;
2. stops Redis for about three seconds and restarts it on the same port and data directory;
3. SIGKILLs the app and restarts it on the same queue file, to report the rest;
4. SIGKILLs the collector again and restarts it.

At the end Redis's counters must equal, metric by metric, the perturbed bits the client's
ledger (in the queue file, written in the same transactions as the queue itself) says were
handed over: every report counted exactly once.
"""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.queue import DurableQueue
from deniable.collector.embedded import RedisServer
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV
from tests.client.test_queue_crash import Child
from tests.e2e.test_pipeline import counters

TOTAL = 20_000
# Paced: each of 4 threads pauses 0.1 s after every 100 reports (about 4,000 reports/s at
# most), so the reporting spans the faults below.
APP_OPTIONS = ("--threads", "4", "--durability", "sync", "--every", "100", "--pause", "0.1",
               "--batch-size", "100", "--max-batch-age", "0.2", "--close-timeout", "40")


def restart(collector: CollectorProcess) -> None:
    collector.stop(signal.SIGKILL)  # no graceful shutdown: requests in flight are cut
    time.sleep(0.3)
    collector.start()


@pytest.mark.slow
def test_counters_equal_the_handed_over_bits_through_crashes(tmp_path: Path,
                                                              metrics_file: Path) -> None:
    redis_dir = tmp_path / "redis"
    store = RedisServer(redis_dir, appendonly=True)
    store.start()
    port = store.port
    collector = CollectorProcess(store.url, metrics_file, workers=2,
                                 env={**OPEN_ENV, "DENIABLE_RETRY_AFTER_SECONDS": "1"})
    queue_path = tmp_path / "app-queue.db"
    children: list[Child] = []
    try:
        collector.start()
        app = Child(collector.url, queue_path, "--reports", str(TOTAL), *APP_OPTIONS)
        children.append(app)
        app.read_until(2_000)
        restart(collector)                                              # fault 1

        app.read_until(4_000)
        store.stop()                                                    # fault 2
        probe = requests.post(f"{collector.url}/v1/reports", json={}, timeout=10)
        assert probe.status_code in (422, 503)  # invalid anyway: it can change nothing
        unavailable = requests.get(f"{collector.url}/v1/metrics/dark_mode/counts", timeout=10)
        assert unavailable.status_code == 503  # the outage is real
        assert unavailable.headers["Retry-After"] == "1"
        time.sleep(2.5)
        store = RedisServer(redis_dir, port=port, appendonly=True)
        store.start()

        app.read_until(7_000)
        app.kill()                                                      # fault 3
        queue = DurableQueue(queue_path)
        handed = sum(e.handed_n for e in queue.ledger().values())
        queue.close()
        assert 7_000 <= handed < TOTAL
        app = Child(collector.url, queue_path, "--reports", str(TOTAL - handed), *APP_OPTIONS)
        children.append(app)

        app.read_until(2_000)
        restart(collector)                                              # fault 4
        lines = app.finish(timeout=60)
        assert "done True" in lines, lines[-3:]

        queue = DurableQueue(queue_path)
        ledger, stats = queue.ledger(), queue.stats()
        queue.close()
        client = redis.Redis.from_url(store.url)
        try:
            in_redis = counters(client)
        finally:
            client.close()
    finally:
        for child in children:
            if child.process.poll() is None:
                child.kill()
        collector.stop()
        store.stop()

    assert sum(e.handed_n for e in ledger.values()) == TOTAL
    assert (stats.queued, stats.dropped, stats.dead_lettered, stats.sent) == (0, 0, 0, TOTAL)
    assert in_redis == {m: (e.handed_n, e.handed_ones) for m, e in ledger.items()}
    assert all((e.sent_n, e.sent_ones) == (e.handed_n, e.handed_ones) for e in ledger.values())
