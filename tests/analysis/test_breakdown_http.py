"""Breakdowns over HTTP: batches with dims posted to a real collector (gunicorn) on real Redis,
read back with HTTPSource (``GET /v1/metrics`` dimensions, ``counts?by=`` and ``?series=``)
and broken down; the same numbers as RedisSource reads straight from Redis."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import json
from collections.abc import Iterator

import pytest
import requests

from deniable.analysis import HTTPSource
from deniable.cli.sources import RedisSource
from deniable.analysis.breakdown import breakdown
from deniable.analysis.sources import SourceError
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.analysis.test_breakdown import rr_share
from tests.servers import collector_with_metrics

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

[metrics.churn_http]
mechanism = "{RR}"
[metrics.churn_http.dimensions.platform]
values = ["android", "ios"]
"""
WARNER = "rr:3/4:1/2"


def live_range() -> tuple[datetime, datetime]:
    """The day before the end of the current hour, taken when a test reads: RANGE, fixed at
    collection, misses the reports the fixture sent once the next hour has begun."""
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return end - timedelta(days=1, hours=1), end


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("bd-http"),
                                workers=1, flush=True) as process:
        _post(process.url, [("adopt_http", RR, 1, {"app_version": "2.3", "platform": "ios"})]
              * 80 + [("adopt_http", RR, 0, {"app_version": "2.3", "platform": "ios"})] * 20
              + [("adopt_http", RR, 0, {"app_version": "2.4", "platform": "android"})] * 100
              + [("adopt_http", RR, 1, {"app_version": "3.0"})] * 99
              + [("adopt_http", RR, 1)] * 7)
        mechanism = requests.get(f"{process.url}/v1/metrics", timeout=10).json()
        os_id = next(m["mechanism"] for m in mechanism["metrics"] if m["name"] == "os_http")
        _post(process.url, [("os_http", os_id, 1, {"platform": "ios"})] * 120)
        yield process


def _post(url: str, reports: list[tuple]) -> None:  # type: ignore[type-arg]
    for at in range(0, len(reports), 500):
        answer = requests.post(f"{url}/v1/reports", json=encode_batch(
            new_batch_id(), reports[at:at + 500]), timeout=10)
        assert answer.status_code in (200, 201, 202), answer.text


@pytest.mark.slow
def test_http_source_reads_dimensions_and_breaks_down(collector) -> None:  # type: ignore[no-untyped-def]
    source = HTTPSource(collector.url)
    assert source.dimensions("adopt_http").names == ("app_version", "platform")
    assert not source.dimensions("plain_http")
    b = breakdown(source, "adopt_http", "app_version", *live_range(), min_reports=100)
    assert [(c.value, c.n, c.suppressed) for c in b.cells] == [
        ("2.3", 100, False), ("2.4", 100, False), ("other", 99, True)]
    assert b.cells[0].summary.unclipped == pytest.approx(rr_share(100, 80))  # type: ignore[union-attr]
    assert b.cells[0].summary.estimate == 1.0  # type: ignore[union-attr]  # clipped to [0, 1]
    assert b.not_stated == 7 and b.total.n == 306
    [pair] = b.comparisons
    assert (pair.a, pair.b, pair.significant) == ("app_version=2.3", "app_version=2.4", True)
    one = source.series_counts("adopt_http", "app_version=other", *live_range())
    assert int(one.n.sum()) == 99


def test_http_and_redis_sources_agree_cell_by_cell(collector, redis_url) -> None:  # type: ignore[no-untyped-def]
    for metric, by in (("adopt_http", "platform,app_version"), ("os_http", "platform")):
        over_http = breakdown(HTTPSource(collector.url), metric, by, *live_range(), min_reports=50)
        from_redis = breakdown(RedisSource(redis_url), metric, by, *live_range(), min_reports=50)
        assert [(c.label, c.n, c.suppressed) for c in over_http.cells] == \
            [(c.label, c.n, c.suppressed) for c in from_redis.cells]
        assert [json.dumps(c.summary.n if c.summary else None) for c in over_http.cells] == \
            [json.dumps(c.summary.n if c.summary else None) for c in from_redis.cells]
    combined = breakdown(HTTPSource(collector.url), "adopt_http", "app_version,platform",
                         *live_range(), min_reports=100)
    shown = [(c.value, c.n) for c in combined.cells if not c.suppressed]
    assert shown == [("2.3, ios", 100), ("2.4, android", 100)]
    assert combined.not_stated == 106   # the 99 of 3.0 stated no platform, 7 stated nothing


def test_a_dimension_the_metric_does_not_declare_names_what_it_declares(collector) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SourceError, match="'channel' is not a dimension.*app_version, platform"):
        breakdown(HTTPSource(collector.url), "adopt_http", "channel", *live_range())


@pytest.mark.slow
def test_an_older_version_breaks_down_with_its_own_mechanism(collector, redis_url,  # type: ignore[no-untyped-def]
                                                              capsys, tmp_path) -> None:
    from deniable.cli.main import main
    _post(collector.url, [("churn_http", RR, 1, {"platform": "ios"})] * 150
          + [("churn_http", RR, 0, {"platform": "android"})] * 120)
    answer = requests.post(f"{collector.url}/v1/admin/metrics", timeout=10, json={
        "name": "churn_http", "mechanism": WARNER,
        "dimensions": {"platform": {"values": ["android", "ios"]}}})
    assert answer.status_code == 201, answer.text  # version 2: a new mechanism
    _post(collector.url, [("churn_http", WARNER, 1, {"platform": "android"})] * 110)
    for source in (HTTPSource(collector.url), RedisSource(redis_url)):
        old = breakdown(source, "churn_http", "platform", *live_range(), min_reports=100, version=1)
        assert old.info is not None and old.info.mechanism.id == RR and old.info.version == 1
        assert [(c.value, c.n) for c in old.cells] == [("android", 120), ("ios", 150)]
        ios = old.cells[1].summary
        assert ios is not None and ios.unclipped == pytest.approx(rr_share(150, 150))
        now = breakdown(source, "churn_http", "platform", *live_range(), min_reports=100)
        assert now.info is not None and now.info.mechanism.id == WARNER
        assert [(c.value, c.n) for c in now.cells] == [("android", 110), ("ios", 0)]
        # P(1 | yes) = 7/8, P(1 | no) = 1/8: 110 ones of 110 debias to (1 - 1/8) / (3/4).
        android = now.cells[0].summary
        assert android is not None and android.unclipped == pytest.approx((1 - 1 / 8) / 0.75)
    assert main(["report", "--collector", collector.url, "--metric", "churn_http", "--by",
                 "platform", "--version", "1", "--format", "json", "--html",
                 str(tmp_path / "old.html"),
                 "--from", live_range()[0].isoformat(), "--to", live_range()[1].isoformat()]) == 0
    [doc] = json.loads(capsys.readouterr().out)["breakdowns"]
    assert (doc["mechanism"], doc["version"]) == (RR, 1)
    assert [c["n"] for c in doc["cells"]] == [120, 150]
    page = (tmp_path / "old.html").read_text()
    assert 'data-metric="churn_http" data-by="platform"' in page
    assert f"<b>{RR}</b>" in page and WARNER not in page  # version 1's mechanism only
