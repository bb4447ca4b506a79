"""Breakdowns end to end: real Reporters with public dimensions, a real collector (gunicorn) on
real Redis, and ``deniable report --by`` reading it over HTTP and straight from Redis.

Adoption truly differs between app versions (2.3: 20%, 2.4: 60%); a third version sends too
few reports and must be suppressed. Sizes: 1,000 fresh (independently randomized) reports per
version, so each debiased share has SE <= 1/sqrt(1000) = 0.032; "within 5 SE" fails with
probability < 1e-6, and the 0.4 difference (SE <= 0.045, z about 9) misses Holm's threshold
(z about 2.4 over three pairs) with probability far below 1e-6."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import inspect
import json
from collections.abc import Iterator

import pytest

from deniable.analysis import HTTPSource
from deniable.cli.sources import RedisSource
from deniable.analysis.breakdown import breakdown
from deniable.cli.main import main
from deniable.client import Delivery, Privacy, Reporter, Storage
from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.skipif("dimensions" not in inspect.signature(Reporter).parameters,
                                reason="this client has no public dimensions yet")
METRICS = """\
[metrics.adoption_e2e]
mechanism = "rr:1/2:1/2"
[metrics.adoption_e2e.dimensions.app_version]
values = ["2.3", "2.4", "2.5"]
"""
TRUTH = {"2.3": 0.2, "2.4": 0.6}
N = 1000


def live_range() -> tuple[datetime, datetime]:
    """The day before the end of the current hour, taken when a test reads: RANGE, fixed at
    collection, misses the reports the fixture sent once the next hour has begun."""
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    return end - timedelta(days=1, hours=1), end


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    from deniable.client.state import IN_MEMORY

    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("bd-client"),
                                workers=1, flush=True) as process:
        for version, n in (("2.3", N), ("2.4", N), ("2.5", 60), (None, 25)):
            device = {"app_version": version} if version else {}
            with Reporter(process.url, process.metrics_file, dimensions=device,
                          storage=Storage(privacy_dir=IN_MEMORY), delivery=Delivery(batch_size=250),
                          privacy=Privacy(one_per_period=False,
                                          fresh={"adoption_e2e"})) as reporter:
                share = TRUTH.get(version or "", 0.5)
                for i in range(n):
                    reporter.report("adoption_e2e", i % 100 < share * 100)
                assert reporter.flush(30)
        yield process


@pytest.mark.slow
def test_report_by_gives_each_version_its_share_and_finds_the_difference(  # type: ignore[no-untyped-def]
        collector, capsys) -> None:
    code = main(["report", "--collector", collector.url, "--metric", "adoption_e2e",
                 "--by", "app_version", "--from", live_range()[0].isoformat(),
                 "--to", live_range()[1].isoformat(), "--format", "json"])
    assert code == 0
    [b] = json.loads(capsys.readouterr().out)["breakdowns"]
    cells = {c["value"]: c for c in b["cells"]}
    assert (cells["2.3"]["n"], cells["2.4"]["n"], cells["2.5"]["n"]) == (N, N, 60)
    for version, truth in TRUTH.items():
        assert abs(cells[version]["estimate"]["unclipped"] - truth) <= 5 / N ** 0.5
    assert cells["2.5"]["suppressed"] and cells["2.5"]["estimate"] is None
    assert "fewer than 100 devices (60 in its busiest day, 60 reports)" in cells["2.5"]["reason"]
    assert b["not_stated"] == 25
    [pair] = b["comparisons"]
    assert (pair["a"], pair["b"], pair["significant"]) == \
        ("app_version=2.3", "app_version=2.4", True)


def test_http_and_redis_agree_on_the_breakdown(collector, redis_url) -> None:  # type: ignore[no-untyped-def]
    over_http = breakdown(HTTPSource(collector.url), "adoption_e2e", "app_version", *live_range())
    from_redis = breakdown(RedisSource(redis_url), "adoption_e2e", "app_version", *live_range())
    assert [(c.label, c.n, c.suppressed, c.summary and c.summary.estimate)
            for c in over_http.cells] == \
        [(c.label, c.n, c.suppressed, c.summary and c.summary.estimate)
         for c in from_redis.cells]
