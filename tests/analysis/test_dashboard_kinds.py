"""The live dashboard for categorical and numeric metrics: its numbers equal the analysis
package's for the same counters (real Redis, the collector's own registry)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from deniable.analysis import summarize
from deniable.cli.sources import RedisSource
from deniable.analysis.report import series_document
from deniable.analysis.timeseries import rolling, series
from deniable.client.kinds import MetricSpec
from tests.analysis.test_kinds_sources import _register
from tests.conftest import put_counts

OS = MetricSpec.build("categorical", epsilon=2.0, categories=["android", "ios", "linux", "bsd"])
STARTUP = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000)


def _same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where
    else:
        assert got == want, where


@pytest.mark.parametrize("spec", [OS, STARTUP], ids=["categorical", "numeric"])
@pytest.mark.parametrize(("every", "window"), [("day", 1), ("day", 3), ("hour", 1)])
def test_dashboard_data_equals_the_analysis(app, redis_client, redis_url, spec, every,  # type: ignore[no-untyped-def]
                                            window) -> None:
    _register(redis_client, "kinded", spec)
    rng = np.random.default_rng(len(every) + window)
    now = datetime.now(timezone.utc)
    hours = {}
    width = spec.mechanism.width
    for _ in range(60):
        n = int(rng.integers(1, 40))
        hours[now - timedelta(hours=int(rng.integers(0, 24 * 10)))] = \
            (n, *(int(v) for v in rng.integers(0, n + 1, size=width - 1)))
    put_counts(redis_client, "kinded", spec.mechanism.id, hours)  # type: ignore[arg-type]
    start, end = now - timedelta(days=8, hours=3), now
    body = app.test_client().get("/dashboard/data", query_string={
        "metric": "kinded", "every": every, "rolling": str(window),
        "from": start.isoformat(), "to": end.isoformat()}).json
    counts = RedisSource(redis_url).counts("kinded", start, end)
    ts = series(counts, every, start, end)
    if window > 1:
        ts = rolling(ts, window)
    expected = series_document(ts)
    _same({k: body[k] for k in expected}, expected, "data")
    assert body["kind"] == spec.kind and "Privacy: epsilon" in body["note"]
    pooled = summarize(counts)
    if pooled.categories is not None:   # the whole range, per category, both intervals
        rows = pooled.categories.rows()
        _same([{k: c[k] for k in ("ci_low", "ci_high", "sim_low", "sim_high", "estimate",
                                  "stderr")} for c in body["summary"]["categories"]],
              [{k: r[k] for k in ("ci_low", "ci_high", "sim_low", "sim_high", "estimate",
                                  "stderr")} for r in rows], "summary")
    else:
        assert body["summary"]["estimate"] == pytest.approx(pooled.estimate)
        assert body["summary"]["ci_high"] == pytest.approx(pooled.ci_high)
