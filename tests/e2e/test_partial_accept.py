"""One mismatched metric never costs its batch: the real client against a real collector
process over HTTP. The app declares ``os`` at epsilon 1 while the collector registers it at
epsilon 2 (the issue's sample): ``dark_mode`` and ``startup_ms`` in the same batches are counted
exactly, ``os``'s reports are kept and shown in ``stats()``, and sent once it is accepted."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from deniable.client import Delivery, Privacy, Reporter
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV
from tests.e2e.test_pipeline import counters

COLLECTOR = """\
[metrics.dark_mode]
description = "Dark mode is on"
mechanism = "rr:3/4:1/2"

[metrics.startup_ms]
description = "Start-up time (ms)"
kind = "numeric"
lower = 0
upper = 5000
clamp = true
epsilon = 1.0

[metrics.os]
description = "Operating system"
kind = "categorical"
categories = ["android", "ios", "other"]
epsilon = %s
"""
N = 5


@pytest.fixture()
def collector(tmp_path: Path, redis_url: str, redis_client: redis.Redis):  # type: ignore[no-untyped-def]
    path = tmp_path / "collector.toml"
    path.write_text(COLLECTOR % "2.0")
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as process:
        yield process


@pytest.mark.slow
def test_the_valid_metrics_of_a_batch_are_counted_and_the_mismatched_one_is_kept(
        collector: CollectorProcess, redis_client: redis.Redis, tmp_path: Path) -> None:
    app_metrics = tmp_path / "app.toml"
    app_metrics.write_text(COLLECTOR % "1.0")  # os at epsilon 1: not what the collector has
    queue = tmp_path / "queue.db"
    with Reporter(collector.url, metrics=app_metrics, queue_path=queue,
                  delivery=Delivery(batch_size=3 * N),
                  privacy=Privacy(one_per_period=False)) as reporter:
        for i in range(N):
            reporter.report("dark_mode", True)
            reporter.report("os", "ios")
            reporter.report("startup_ms", 100.0 * i)
        assert reporter.flush(timeout=15) is True
        stats = reporter.stats()
        assert (stats.sent, stats.refused, stats.dead_lettered, stats.queued) == (2 * N, N, 0, 0)
        assert set(stats.refused_metrics) == {"os"}
        assert "must be the metric's registered mechanism" in stats.refused_metrics["os"]
        assert reporter.dead_letters() == []
        ledger = reporter.ledger()
        assert (ledger["os"].handed_n, ledger["os"].sent_n) == (N, 0)
        assert ledger["dark_mode"].sent_n == ledger["startup_ms"].sent_n == N
    totals = counters(redis_client)
    assert set(totals) == {"dark_mode", "startup_ms"}
    assert totals["dark_mode"][0] == totals["startup_ms"][0] == N

    # A restart keeps them; once the collector registers the app's question, the catalogue
    # fetched at start shows it and they are sent, in new batches, and counted once.
    collector.stop()
    (tmp_path / "collector.toml").write_text(COLLECTOR % "1.0")
    collector.start()
    with Reporter(collector.url, metrics=app_metrics, queue_path=queue,
                  privacy=Privacy(one_per_period=False)) as reporter:
        deadline = time.monotonic() + 15
        while reporter.stats().refused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reporter.catalogue_fetched
        assert reporter.flush(timeout=15) is True
        stats = reporter.stats()
        assert (stats.refused, stats.refused_metrics, stats.sent) == (0, {}, 3 * N)
    totals = counters(redis_client)
    assert totals["os"][0] == N and totals["dark_mode"][0] == N
