"""End to end, an open metric declared with ``period = "week"`` (issue 33): a real collector
(gunicorn) on a real redis-server counts it in one string per ISO week, serves it per week
(``GET /v1/metrics/<name>/counts``) and ``deniable report`` discovers per week; each real
``Reporter`` sends one report per week, whatever the value of a second ``report()``.

False-failure rate: the test asserts only that the one report per device is the first (exact),
the key and bucket layout (exact), that no string outside the two reported is discovered
(each shown with probability <= 1 - confidence = 1e-7, the decoder's Bonferroni bound,
docs/discovery.md), and that "oom" is (75 % of 16,000 reports at epsilon 4 with od:8, pooled
over its levels: more than 30 standard errors above the threshold z <= 6.8, so missed with
probability far below 1e-9). The devices' coins are the system's (not seeded).
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import redis
import requests

from deniable.audit.privacy_scan import scan_redis
from deniable.cli.main import main
from deniable.client import Privacy, Reporter, Storage
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.randomness import SecureBits
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from deniable.core import keys
from deniable.core.periods import period_hour
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow  # starts servers: not in the fast lane

TABLE = {"kind": "open", "epsilon": 4.0, "max_bytes": 8, "period": "week"}
METRICS = """\
[metrics.crash_sig]
kind = "open"
epsilon = 4.0
max_bytes = 8
period = "week"
"""
POPULATION = {"oom": 12_000, "segv@0x1": 4_000}
REAL_REPORTERS = 20  # of the "oom" devices


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[CollectorProcess, Path]]:
    # flush: the session's redis-server is shared: leave no registry or counters behind
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("open-period-live"),
                                flush=True) as process:
        yield process, Path(process.metrics_file)


def test_a_weekly_open_metric_is_counted_served_and_discovered_per_week(  # type: ignore[no-untyped-def]
        collector, redis_url: str, capsys) -> None:
    process, metrics_file = collector
    doc = requests.get(f"{process.url}/v1/metrics", timeout=5).json()
    entry = next(e for e in doc["metrics"] if e["name"] == "crash_sig")
    assert entry["period"] == "week" and entry["memoization"] == "fresh"
    spec = MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"]))
    sketch = spec.mechanism
    assert isinstance(sketch, OpenDomainSketch)

    for _ in range(REAL_REPORTERS):  # the real client, one device each: one report a week
        with Reporter(process.url, {"crash_sig": TABLE}, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(max_epsilon=4.0)) as device:  # above the default ceiling, knowingly
            device.report("crash_sig", "oom")
            device.report("crash_sig", "segv@0x1")  # the same week: a no-op, whatever the value
            device.report("crash_sig", "oom")
            assert device.stats().period_skipped == 2
            assert device.flush(30)
            assert device.stats().sent == 1

    reports = []
    rng = SecureBits()
    for value, devices in POPULATION.items():
        padded = spec.encode(value)
        for _ in range(devices - (REAL_REPORTERS if value == "oom" else 0)):
            reports.append(("crash_sig", sketch.id,
                            sketch.perturb_padded(padded, rng)))  # type: ignore[arg-type]
    with requests.Session() as session:
        for first in range(0, len(reports), 1000):
            answer = session.post(f"{process.url}/v1/reports", timeout=30,
                                  json=encode_batch(new_batch_id(), reports[first:first + 1000]))
            assert answer.status_code == 202, answer.text
    n = sum(POPULATION.values())

    # One string for the week, named by its Monday, expiring at the week's end + retention.
    now_hour = keys.hour_index(datetime.now(timezone.utc))
    monday = period_hour(now_hour, "week")
    client = redis.Redis.from_url(redis_url)
    (key,) = client.keys(keys.OPEN_COUNTERS_PATTERN)
    assert key.decode() == keys.open_counters("crash_sig", sketch.id, now_hour, "week")
    assert key.decode().endswith(f":ow:{sketch.id}:{keys.hour_start(monday):%Y%m%d}")
    assert client.expiretime(key) == keys.open_counters_expire_at(now_hour, 90, "week")
    counters = np.frombuffer(client.get(key), dtype=keys.COUNTER_DTYPE)  # type: ignore[arg-type]
    assert counters[0] == n and counters[1:].sum() == n
    assert scan_redis(client) == []  # in the key layout, expiring on the hour

    # Served per week.
    counts = requests.get(f"{process.url}/v1/metrics/crash_sig/counts", timeout=5).json()
    assert counts["granularity"] == "week" and counts["period"] == "week"
    (bucket,) = counts["buckets"]
    assert bucket["start"] == keys.hour_start(monday).isoformat() and bucket["n"] == n

    # Discovered per week, from Redis and over HTTP alike.
    assert main(["report", "--redis-url", redis_url, "--metrics-file", str(metrics_file),
                 "--metric", "crash_sig", "--format", "json",
                 "--confidence", "0.9999999"]) == 0
    (found_doc,) = json.loads(capsys.readouterr().out)["open"]
    assert found_doc["period"] == "week"
    window, week = found_doc["periods"]
    assert window["period"] == "window" and window["n"] == n
    assert week["period"] == f"week of {keys.hour_start(monday):%Y-%m-%d}" and week["n"] == n
    found = {f["string"] for f in week["found"]}
    assert found <= set(POPULATION) and "oom" in found
    assert main(["report", "--collector", process.url, "--metric", "crash_sig", "--format",
                 "json", "--confidence", "0.9999999"]) == 0
    (over_http,) = json.loads(capsys.readouterr().out)["open"]
    assert over_http == found_doc
