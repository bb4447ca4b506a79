"""The dashboard's numbers (the collector, with the mechanism's own estimator and the collector's
periods) equal the analysis package's for the same counters, without importing it."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from deniable.cli.sources import RedisSource
from deniable.analysis.report import series_document
from deniable.analysis.timeseries import rolling, series
from tests.conftest import put_counts

X, X_MECH = "feature_x_enabled", "rr:1/2:1/2"


@pytest.mark.parametrize(("every", "window"), [("hour", 1), ("day", 1), ("day", 3), ("week", 2)])
def test_dashboard_data_equals_the_analysis(app, redis_client, redis_url: str,  # type: ignore[no-untyped-def]
                                            metrics_file: Path, every: str, window: int) -> None:
    rng = random.Random(every)
    now = datetime.now(timezone.utc)
    hours = {}
    for _ in range(120):
        n = rng.randint(1, 40)
        hours[now - timedelta(hours=rng.randrange(24 * 20))] = (n, rng.randint(0, n))
    hours[now - timedelta(hours=2)] = (3, 3)  # a clipped bucket
    put_counts(redis_client, X, X_MECH, hours)
    start, end = now - timedelta(days=15, hours=5), now
    query = {"metric": X, "every": every, "rolling": str(window), "from": start.isoformat(),
             "to": end.isoformat()}
    body = app.test_client().get("/dashboard/data", query_string=query).json
    ts = series(RedisSource(redis_url, metrics_file).counts(X, start, end), every, start, end)
    if window > 1:
        ts = rolling(ts, window)
    expected = series_document(ts)
    assert {k: body[k] for k in expected if k != "buckets"} == \
        {k: v for k, v in expected.items() if k != "buckets"}
    assert len(body["buckets"]) == len(expected["buckets"])
    for got, want in zip(body["buckets"], expected["buckets"]):
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == (pytest.approx(value, abs=1e-12) if isinstance(value, float)
                                else value), key
