"""Categorical, histogram and numeric metrics end to end: the real client, a real collector
process over HTTP, a real Redis, and the analysis reading it back."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import redis

from deniable.analysis import HTTPSource
from deniable.cli.sources import RedisSource
from deniable.analysis.categorical import estimate_categories
from deniable.analysis.numeric import estimate_mean
from deniable.client import Delivery, Privacy, Reporter
from deniable.client.errors import InvalidParameterError
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

OS = ["android", "ios", "windows", "macos", "linux", "other"]
SHARES = [0.40, 0.25, 0.15, 0.10, 0.07, 0.03]
METRICS = """\
[metrics.os]
description = "Operating system"
kind = "categorical"
categories = ["android", "ios", "windows", "macos", "linux", "other"]
epsilon = 2.0
memoization = "fresh"

[metrics.crashes]
description = "Crashes this week"
kind = "histogram"
edges = [0, 1, 2, 5, 10, 1000]
clamp = true
epsilon = 1.0
memoization = "fresh"

[metrics.startup_ms]
description = "Start-up time (ms)"
kind = "numeric"
lower = 0
upper = 5000
clamp = true
epsilon = 1.0
memoization = "fresh"

[metrics.big_menu]
description = "Menu item opened first (64 items: unary encoding)"
kind = "categorical"
categories = [%s]
epsilon = 1.0
memoization = "fresh"
""" % ", ".join(f'"item_{i}"' for i in range(64))
REPORTS = 6000
Z = 6
"""Standard errors of each estimate from its truth (the drawn values): 11 checks (HTTP and Redis
read the same counts) at 2e-9 each, 2.2e-8 per run (5 SE gave 6.3e-6). The plug-in SE of a
category share is conservative: fixed true values spread the count less than the pooled rate."""


@pytest.fixture()
def kinds_collector(tmp_path: Path, redis_url: str, redis_client: redis.Redis):  # type: ignore[no-untyped-def]
    path = tmp_path / "metrics.toml"
    path.write_text(METRICS)
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as collector:
        yield collector, path


def test_every_kind_travels_from_the_client_to_an_honest_estimate(kinds_collector) -> None:  # type: ignore[no-untyped-def]
    collector, metrics_path = kinds_collector
    draw = random.Random(12)
    true_os = draw.choices(OS, SHARES, k=REPORTS)
    startup = [draw.uniform(200, 1800) for _ in range(REPORTS)]
    crashes = [draw.choice([0, 0, 0, 1, 3, 7, 2000]) for _ in range(REPORTS)]
    menu = [f"item_{min(63, int(draw.expovariate(0.2)))}" for _ in range(REPORTS)]
    with Reporter(collector.url, metrics_path, delivery=Delivery(batch_size=500),
                  privacy=Privacy(one_per_period=False)) as reporter:
        for i in range(REPORTS):
            reporter.report("os", true_os[i])
            reporter.report("startup_ms", startup[i])
            reporter.report("crashes", crashes[i])  # 2000 is clamped into the last bucket
            reporter.report("big_menu", menu[i])
        # A bad value raises at the call and is never queued.
        for metric, bad in (("os", "beos"), ("os", 3), ("startup_ms", float("nan")),
                            ("big_menu", None)):
            with pytest.raises(InvalidParameterError):
                reporter.report(metric, bad)
        assert reporter.flush(timeout=60) is True
        assert reporter.stats().sent == 4 * REPORTS

    for source in (HTTPSource(collector.url), RedisSource(collector.redis_url, metrics_path)):
        os_counts = source.counts("os")
        row = os_counts.values.sum(axis=0)
        assert row[0] == REPORTS
        spec = os_counts.metric.spec
        found = estimate_categories(row, spec.mechanism, spec.labels)
        for i, label in enumerate(OS):
            truth = true_os.count(label) / REPORTS
            assert abs(found.value[i] - truth) < Z * found.stderr[i], label
            assert found.sim_low[i] <= found.ci_low[i] <= found.ci_high[i] <= found.sim_high[i]

        mean = estimate_mean(*_n_ones(source.counts("startup_ms")),
                             source.metrics()["startup_ms"].spec.mechanism)
        assert abs(mean.mean - sum(startup) / REPORTS) < Z * mean.stderr

        hist = source.counts("crashes")
        row = hist.values.sum(axis=0)
        assert row[0] == REPORTS and len(row) == 1 + 5
        spec = hist.metric.spec
        found = estimate_categories(row, spec.mechanism, spec.labels)
        in_last = sum(c >= 10 for c in crashes) / REPORTS
        assert abs(found.value[4] - in_last) < Z * found.stderr[4]

        menu_counts = source.counts("big_menu")
        spec = menu_counts.metric.spec
        assert spec.mechanism.id.startswith("ss:64:2:")  # chosen by variance at d = 64, eps = 1
        found = estimate_categories(menu_counts.values.sum(axis=0), spec.mechanism, spec.labels)
        for i in (0, 1, 5):
            truth = menu.count(f"item_{i}") / REPORTS
            assert abs(found.value[i] - truth) < Z * found.stderr[i]


def _n_ones(counts) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    totals = counts.values.sum(axis=0)
    return int(totals[0]), int(totals[1])
