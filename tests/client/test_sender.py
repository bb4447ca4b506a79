"""The background sender's retry policy, against real HTTP servers."""
from __future__ import annotations

import json
import random
import time
from email.utils import formatdate

import pytest

from deniable.client import Delivery, Privacy, Reporter, UploadError
from deniable.client.mechanism import DEFAULT
from deniable.client.metrics import describe_metric
from deniable.client.transport import Transport, parse_retry_after
from tests.e2e.test_pipeline import counters
from tests.servers import recording_collector

CATALOGUE = {"metrics": [describe_metric("feature_x_enabled", "X", DEFAULT)]}
METRICS = {"feature_x_enabled": "rr:1/2:1/2"}


class Largest(random.Random):
    """Every jittered delay takes its upper bound, so the schedule becomes checkable."""

    def uniform(self, a: float, b: float) -> float:
        return b


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_honoured_and_the_same_bytes_are_resent(status: int) -> None:
    answers = [(status, {"Retry-After": "1"})]
    with recording_collector(CATALOGUE, answers) as (url, recorder):
        with Reporter(url, delivery=Delivery(batch_size=5, backoff=0.01),
                      privacy=Privacy(one_per_period=False), metrics=METRICS) as reporter:
            for _ in range(5):
                reporter.report("feature_x_enabled", True)
            wait_for(lambda: reporter.stats().sent == 5)
        assert recorder.statuses == [status, 202]
        assert recorder.post_times[1] - recorder.post_times[0] >= 1.0
        assert recorder.bodies[0] == recorder.bodies[1]  # byte for byte: same batch id


@pytest.mark.slow
def test_a_flush_does_not_cut_a_retry_after_short() -> None:
    with recording_collector(CATALOGUE, [(503, {"Retry-After": "1"})]) as (url, recorder):
        with Reporter(url, delivery=Delivery(batch_size=1, backoff=0.01),
                      privacy=Privacy(one_per_period=False), metrics=METRICS) as reporter:
            reporter.report("feature_x_enabled", True)
            wait_for(lambda: len(recorder.bodies) == 1)
            assert reporter.flush(timeout=5) is True
        assert recorder.post_times[1] - recorder.post_times[0] >= 1.0


@pytest.mark.slow
def test_retries_back_off_exponentially() -> None:
    answers = [(500, {}), (502, {}), (504, {})]
    with recording_collector(CATALOGUE, answers) as (url, recorder):
        reporter = Reporter(url, delivery=Delivery(batch_size=1, backoff=0.1, max_backoff=10),
                            privacy=Privacy(one_per_period=False), metrics=METRICS)
        reporter._sender._rand = Largest()
        reporter.report("feature_x_enabled", False)
        wait_for(lambda: len(recorder.bodies) == 4)
        reporter.close()
        gaps = [b - a for a, b in zip(recorder.post_times, recorder.post_times[1:])]
        for gap, bound in zip(gaps, (0.1, 0.2, 0.4)):
            assert bound <= gap < bound + 0.5
        assert len({json.loads(b)["batch_id"] for b in recorder.bodies}) == 1


def test_the_default_delays_come_from_the_system_csprng() -> None:
    with recording_collector(CATALOGUE) as (url, _):
        with Reporter(url, privacy=Privacy(one_per_period=False), metrics=METRICS) as reporter:
            assert type(reporter._sender._rand) is random.SystemRandom


@pytest.mark.slow
def test_upload_jitter_delays_the_first_upload_after_idle() -> None:
    with recording_collector(CATALOGUE) as (url, recorder):
        reporter = Reporter(url, delivery=Delivery(batch_size=1, upload_jitter=0.5),
                            privacy=Privacy(one_per_period=False), metrics=METRICS)
        reporter._sender._rand = Largest()
        sealed_at = time.monotonic()
        reporter.report("feature_x_enabled", True)
        wait_for(lambda: len(recorder.bodies) == 1)
        assert recorder.post_times[0] - sealed_at >= 0.5
        reporter.close()


def test_a_batch_of_refused_metrics_is_kept_per_metric_and_the_queue_moves_on(
        live_collector, redis_client) -> None:
    # "not_registered" is a valid name the collector does not know: its whole batch is
    # refused (422 with a "refused" member), and the reports are kept, not dead-lettered.
    metrics = {"not_registered": "rr:1/2:1/2", "feature_x_enabled": "rr:1/2:1/2"}
    with Reporter(live_collector.url, delivery=Delivery(batch_size=3),
                  privacy=Privacy(one_per_period=False), metrics=metrics) as reporter:
        for _ in range(3):
            reporter.report("not_registered", True)
        for _ in range(3):
            reporter.report("feature_x_enabled", True)
        assert reporter.flush(timeout=10) is True
        assert reporter.dead_letters() == []
        stats = reporter.stats()
        assert (stats.queued, stats.sent, stats.dead_lettered, stats.refused) == (0, 3, 0, 3)
        assert "/reports/0/metric is not a registered metric" in \
            stats.refused_metrics["not_registered"]
        # Sent again in a new batch, refused again: kept, never counted twice.
        assert reporter.retry_refused() == 3
        assert reporter.flush(timeout=10) is True
        stats = reporter.stats()
        assert (stats.queued, stats.sent, stats.refused) == (0, 3, 3)
    totals = counters(redis_client)
    assert set(totals) == {"feature_x_enabled"} and totals["feature_x_enabled"][0] == 3


def test_a_batch_the_collector_refuses_whole_is_dead_lettered() -> None:
    with recording_collector(CATALOGUE, [(400, {})]) as (url, recorder):
        with Reporter(url, delivery=Delivery(batch_size=2), privacy=Privacy(one_per_period=False),
                      metrics=METRICS) as reporter:
            for _ in range(4):
                reporter.report("feature_x_enabled", True)
            assert reporter.flush(timeout=10) is True
            [letter] = reporter.dead_letters()
            assert letter.status == 400 and letter.n_reports == 2
            assert "scripted 400" in letter.reason
            stats = reporter.stats()
            assert (stats.sent, stats.dead_lettered, stats.refused) == (2, 2, 0)
        assert all(h.get("Prefer") == "handling=lenient" for h in recorder.headers
                   if h.get("Content-Type") == "application/json")


def test_a_transport_without_retries_makes_one_attempt() -> None:
    with recording_collector(CATALOGUE, [(503, {"Retry-After": "7"})]) as (url, recorder):
        transport = Transport(url, retries=0)
        try:
            with pytest.raises(UploadError) as info:
                transport.send({"batch_id": "00" * 16, "reports": []})
        finally:
            transport.close()
        assert len(recorder.bodies) == 1
        assert (info.value.status, info.value.retryable, info.value.retry_after) == (503, True, 7)


def test_retry_after_parses_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now) == 30
    assert parse_retry_after(formatdate(now - 30, usegmt=True), now) == 0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after(None, now) is None
