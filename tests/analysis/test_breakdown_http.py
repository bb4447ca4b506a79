"""Breakdowns over HTTP: batches with dims posted to a real collector (gunicorn) on real Redis,
read back with HTTPSource (``GET /v1/metrics`` dimensions, ``counts?by=`` and ``?series=``)
and broken down; the same numbers as RedisSource reads straight from Redis."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
import requests

from deniable.analysis import HTTPSource, RedisSource
from deniable.analysis.breakdown import breakdown
from deniable.analysis.sources import SourceError
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.analysis.test_breakdown import RANGE, rr_share
from tests.conftest import OPEN_ENV

RR = "rr:1/2:1/2"
METRICS = f"""\
[metrics.adopt_http]
mechanism = "{RR}"
combinations = [["app_version", "platform"]]
[metrics.adopt_http.dimensions.app_version]
values = ["2.3", "2.4"]
other = true
[metrics.adopt_http.dimensions.platform]
values = ["android", "ios"]

[metrics.os_http]
kind = "categorical"
categories = ["android", "ios", "linux"]
epsilon = 2.0
[metrics.os_http.dimensions.platform]
values = ["android", "ios"]

[metrics.plain_http]
mechanism = "{RR}"
"""


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    path = tmp_path_factory.mktemp("bd-http") / "metrics.toml"
    path.write_text(METRICS)
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as process:
        _post(process.url, [("adopt_http", RR, 1, {"app_version": "2.3", "platform": "ios"})]
              * 80 + [("adopt_http", RR, 0, {"app_version": "2.3", "platform": "ios"})] * 20
              + [("adopt_http", RR, 0, {"app_version": "2.4", "platform": "android"})] * 100
              + [("adopt_http", RR, 1, {"app_version": "3.0"})] * 99
              + [("adopt_http", RR, 1)] * 7)
        mechanism = requests.get(f"{process.url}/v1/metrics", timeout=10).json()
        os_id = next(m["mechanism"] for m in mechanism["metrics"] if m["name"] == "os_http")
        _post(process.url, [("os_http", os_id, 1, {"platform": "ios"})] * 120)
        yield process
    redis.Redis.from_url(redis_url).flushdb()  # leave no metrics behind for other modules


def _post(url: str, reports: list[tuple]) -> None:  # type: ignore[type-arg]
    for at in range(0, len(reports), 500):
        answer = requests.post(f"{url}/v1/reports", json=encode_batch(
            new_batch_id(), reports[at:at + 500]), timeout=10)
        assert answer.status_code in (200, 201, 202), answer.text


def test_http_source_reads_dimensions_and_breaks_down(collector) -> None:  # type: ignore[no-untyped-def]
    source = HTTPSource(collector.url)
    assert source.dimensions("adopt_http").names == ("app_version", "platform")
    assert not source.dimensions("plain_http")
    b = breakdown(source, "adopt_http", "app_version", *RANGE, min_reports=100)
    assert [(c.value, c.n, c.suppressed) for c in b.cells] == [
        ("2.3", 100, False), ("2.4", 100, False), ("other", 99, True)]
    assert b.cells[0].summary.unclipped == pytest.approx(rr_share(100, 80))  # type: ignore[union-attr]
    assert b.cells[0].summary.estimate == 1.0  # type: ignore[union-attr]  # clipped to [0, 1]
    assert b.not_stated == 7 and b.total.n == 306
    [pair] = b.comparisons
    assert (pair.a, pair.b, pair.significant) == ("app_version=2.3", "app_version=2.4", True)
    one = source.series_counts("adopt_http", "app_version=other", *RANGE)
    assert int(one.n.sum()) == 99


def test_http_and_redis_sources_agree_cell_by_cell(collector, redis_url) -> None:  # type: ignore[no-untyped-def]
    for metric, by in (("adopt_http", "platform,app_version"), ("os_http", "platform")):
        over_http = breakdown(HTTPSource(collector.url), metric, by, *RANGE, min_reports=50)
        from_redis = breakdown(RedisSource(redis_url), metric, by, *RANGE, min_reports=50)
        assert [(c.label, c.n, c.suppressed) for c in over_http.cells] == \
            [(c.label, c.n, c.suppressed) for c in from_redis.cells]
        assert [json.dumps(c.summary.n if c.summary else None) for c in over_http.cells] == \
            [json.dumps(c.summary.n if c.summary else None) for c in from_redis.cells]
    combined = breakdown(HTTPSource(collector.url), "adopt_http", "app_version,platform",
                         *RANGE, min_reports=100)
    shown = [(c.value, c.n) for c in combined.cells if not c.suppressed]
    assert shown == [("2.3, ios", 100), ("2.4, android", 100)]
    assert combined.not_stated == 106   # the 99 of 3.0 stated no platform, 7 stated nothing


def test_a_dimension_the_metric_does_not_declare_names_what_it_declares(collector) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SourceError, match="'channel' is not a dimension.*app_version, platform"):
        breakdown(HTTPSource(collector.url), "adopt_http", "channel", *RANGE)
