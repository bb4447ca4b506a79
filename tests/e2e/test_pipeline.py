"""Device -> collector -> Redis -> report, with every part real and on the wire."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
import requests

from deniable.analysis import HTTPSource, summarize
from deniable.cli.sources import RedisSource
from deniable.client import Connection, Delivery, Privacy, Reporter
from deniable.client.randomness import SecureBits
from deniable.client.wire import new_batch_id
from deniable.core import keys
from deniable.collector.server import CollectorProcess
from deniable.collector.store import Store
from tests.conftest import DECLARED, OPEN_ENV, snapshot
from tests.servers import response_dropping_proxy


class RecordingBits:
    """The secure source, recording nothing but passing through: used to count bits."""

    def __init__(self) -> None:
        self.source = SecureBits()

    def bits(self, k: int) -> int:
        return self.source.bits(k)


def counters(redis_client: redis.Redis) -> dict[str, tuple[int, int]]:
    """metric -> (n, ones), summed over every hour bucket in Redis."""
    return Store(redis_client).totals()


def test_counters_equal_exactly_what_the_client_sent(live_collector, redis_client) -> None:
    with Reporter(live_collector.url, DECLARED, delivery=Delivery(batch_size=100),
                  privacy=Privacy(one_per_period=False)) as reporter:
        for i in range(2_500):
            reporter.report("feature_x_enabled", i % 10 == 0)
            reporter.report("dark_mode", i % 2 == 0)
        assert reporter.flush() is True
        ledger = reporter.ledger()
        assert reporter.stats().sent == 5_000
    # The ledger counts the perturbed bits as they were queued; Redis, as they arrived.
    assert {m: (e.handed_n, e.handed_ones) for m, e in ledger.items()} == counters(redis_client)
    assert all((e.sent_n, e.sent_ones) == (e.handed_n, e.handed_ones) for e in ledger.values())
    assert sum(e.handed_n for e in ledger.values()) == 5_000


def test_a_resent_batch_over_http_counts_once(live_collector, redis_client) -> None:
    body = {"batch_id": "ab" * 16, "reports": [
        {"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": 1}] * 10}
    first = requests.post(f"{live_collector.url}/v1/reports", json=body, timeout=5)
    assert first.status_code == 202 and first.json()["accepted"] == 10
    before = snapshot(redis_client)
    second = requests.post(f"{live_collector.url}/v1/reports", json=body, timeout=5)
    assert second.status_code == 200 and second.json()["accepted"] == 0
    assert snapshot(redis_client) == before
    assert counters(redis_client) == {"feature_x_enabled": (10, 10)}


@pytest.mark.parametrize("data, content_type, status", [
    (b"{", "application/json", 400),
    (b"{}", "text/plain", 415),
    (b"x" * (2 << 20), "application/json", 413),
    (json.dumps({"batch_id": "00" * 16, "reports": [
        {"metric": "feature_x_enabled", "mechanism": "rr:1/2:1/2", "bit": 1.0}]}).encode(),
     "application/json", 422),
])
def test_bad_requests_over_http_change_nothing(live_collector, redis_client, data: bytes,
                                               content_type: str, status: int) -> None:
    requests.post(f"{live_collector.url}/v1/reports", timeout=5, json={
        "batch_id": "cd" * 16,
        "reports": [{"metric": "dark_mode", "mechanism": "rr:3/4:1/2", "bit": 1}]})
    before = snapshot(redis_client)
    response = requests.post(f"{live_collector.url}/v1/reports", data=data, timeout=5,
                             headers={"Content-Type": content_type})
    assert response.status_code == status
    assert response.headers["Content-Type"] == "application/problem+json"
    assert snapshot(redis_client) == before


@pytest.mark.slow
def test_a_retry_after_a_lost_response_reuses_the_batch_id(live_collector, redis_client) -> None:
    # The first two POSTs reach the collector and are applied, but their answers are lost;
    # the client times out and retries the same batch id, which is counted once.
    with response_dropping_proxy(live_collector.port, drop_first=2) as proxy_url:
        reporter = Reporter(proxy_url, delivery=Delivery(batch_size=50, backoff=0.05),
                            privacy=Privacy(one_per_period=False),
                            connection=Connection(timeout=(1.0, 1.0)),
                            metrics={"feature_x_enabled": "rr:1/2:1/2"})
        for _ in range(50):
            reporter.report("feature_x_enabled", True)
        assert reporter.close(timeout=15) is True
    assert counters(redis_client)["feature_x_enabled"][0] == 50


@pytest.mark.slow
def test_a_failed_upload_stays_queued_and_is_retried_with_the_same_batch_id(
        redis_url: str, metrics_file: Path, redis_client, tmp_path: Path) -> None:
    collector = CollectorProcess(redis_url, metrics_file, workers=1, env=OPEN_ENV)
    reporter = Reporter(collector.url,
                        delivery=Delivery(batch_size=1000, backoff=0.05, max_backoff=0.2),
                        privacy=Privacy(one_per_period=False),
                        connection=Connection(timeout=(0.5, 0.5)),
                        metrics={"dark_mode": "rr:3/4:1/2"}, queue_path=tmp_path / "queue.db")
    for _ in range(40):
        reporter.report("dark_mode", False)
    assert reporter.flush(timeout=0.5) is False  # nobody is listening yet
    assert reporter.stats().queued == 40
    batch = reporter._queue.next_batch()
    assert batch is not None
    with collector:
        assert reporter.flush(timeout=15) is True
        assert reporter.stats().sent == 40
    reporter.close()
    assert counters(redis_client)["dark_mode"][0] == 40
    assert redis_client.exists(keys.batch(batch.batch_id))  # the id it sealed


def test_analysis_reads_the_same_counts_over_http_and_from_redis(
        live_collector, redis_client, redis_url: str, metrics_file: Path) -> None:
    # One reporter plays 4,000 devices: fresh coins per report, as 4,000 memoized devices.
    with Reporter(live_collector.url, metrics_file, delivery=Delivery(batch_size=500),
                  privacy=Privacy(one_per_period=False, fresh={"feature_x_enabled"})) as reporter:
        for i in range(4_000):
            reporter.report("feature_x_enabled", i % 4 == 0)
    over_http = summarize(HTTPSource(live_collector.url).counts("feature_x_enabled"))
    from_redis = summarize(RedisSource(redis_url, metrics_file).counts("feature_x_enabled"))
    assert over_http == from_redis
    assert over_http.n == 4_000
    # Exactly 1,000 true yes: within 5.5 SE of 0.25 fails with probability 3.8e-8 (the plug-in SE
    # is conservative). It replaces "the 95% CI covers 0.25 or the interval is not wide", which
    # every run passed (n = 4,000 is never wide), so it could not fail at all.
    assert abs(over_http.estimate - 0.25) <= 5.5 * over_http.stderr
    assert over_http.estimate == pytest.approx(2 * over_http.ones / 4_000 - 0.5)


def test_redis_source_sees_metrics_registered_at_runtime(http, redis_url: str) -> None:
    created = http.post("/v1/admin/metrics", json={"name": "onboarding_done",
                                                   "mechanism": "rr:3/4:1/2"})
    assert created.status_code == 201
    body = {"batch_id": "ef" * 16, "reports": [
        {"metric": "onboarding_done", "mechanism": "rr:3/4:1/2", "bit": b} for b in (1, 1, 0)]}
    assert http.post("/v1/reports", json=body).status_code == 202
    source = RedisSource(redis_url)  # no metrics file: the registry in Redis is enough
    assert "onboarding_done" in source.metrics()
    counts = source.counts("onboarding_done")
    assert (int(counts.n.sum()), int(counts.ones.sum())) == (3, 2)


@pytest.mark.slow
def test_older_versions_and_retired_metrics_stay_readable_for_analysts(
        live_collector, redis_client, redis_url: str) -> None:
    admin = f"{live_collector.url}/v1/admin/metrics"

    def post(mechanism: str, bits: list[int]) -> None:
        body = {"batch_id": new_batch_id(), "reports": [
            {"metric": "checkout_v", "mechanism": mechanism, "bit": b} for b in bits]}
        assert requests.post(f"{live_collector.url}/v1/reports", json=body,
                             timeout=5).status_code == 202

    assert requests.post(admin, json={"name": "checkout_v", "mechanism": "rr:1/2:1/2"},
                         timeout=5).status_code == 201
    post("rr:1/2:1/2", [1, 0, 0, 0])
    assert requests.post(admin, json={"name": "checkout_v", "mechanism": "rr:3/4:1/2"},
                         timeout=5).json()["result"] == "new_version"
    post("rr:3/4:1/2", [1, 1])
    assert requests.post(f"{admin}/checkout_v/retire", timeout=5).status_code == 200
    # Each collector process trusts its copy of the registry for REGISTRY_CACHE_SECONDS (2 s).
    time.sleep(2.5)
    for source in (HTTPSource(live_collector.url), RedisSource(redis_url)):
        current, first = source.counts("checkout_v"), source.counts("checkout_v", version=1)
        assert (current.metric.mechanism.id, int(current.n.sum())) == ("rr:3/4:1/2", 2)
        assert (first.metric.mechanism.id, int(first.n.sum()), int(first.ones.sum())) == \
            ("rr:1/2:1/2", 4, 1)
        # Each version debiases with its own mechanism: 2 * 1/4 - 1/2 = 0 for the first.
        assert summarize(first).unclipped == pytest.approx(0.0)
