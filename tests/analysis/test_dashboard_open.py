"""The dashboard asks the kind (presentation hints in ``/dashboard/data``) and shows open-domain
metrics: the strings the analysis' decoder discovers over the range and on each UTC day, from
the counters in a real Redis (issues 31 and 33).

The counters are made by the real client's perturbation with seeded coins (``_counters``), so
every test here is deterministic: no false-failure rate to state. The claims are equalities with
``deniable.analysis.discovery.discover`` on the same counters, not statistical ones.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from deniable.analysis.discovery import discover
from deniable.cli.serve import discover_period
from deniable.client.kinds import KINDS, MetricSpec, kind_of
from deniable.collector.dashboard import presentation, use_discovery
from deniable.core import keys
from tests.analysis.test_discovery import _counters

SPECS = {
    "boolean": MetricSpec.build("boolean", epsilon=1.0),
    "categorical": MetricSpec.build("categorical", epsilon=2.0, categories=["a", "b", "c"]),
    "histogram": MetricSpec.build("histogram", epsilon=2.0, edges=[0, 10, 100]),
    "numeric": MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000),
    "open": MetricSpec.build("open", epsilon=4.0, max_bytes=4),
}
DAYS = {  # days ago -> devices per string (one report each); "<b>" checks escaping in tests
    1: {"oom": 1200, "<b>": 900, "gc": 700, **{f"t{i:03d}": 2 for i in range(600)}},
    3: {"oom": 600, "bus!": 900, **{f"t{i:03d}": 2 for i in range(600)}},
}


def _register(redis_client: Any, name: str, spec: MetricSpec) -> None:
    """A live-registry entry for ``spec`` (an open metric is always fresh)."""
    version = {"version": 1, "mechanism": spec.mechanism.id,
               "registered": "2026-11-01T00:00:00+00:00", "memoization": "fresh",
               "instantaneous": None, "period": "day", **spec.describe()}
    redis_client.hset(keys.registry(), name, json.dumps({
        "name": name, "description": f"{name} description", "retention_days": 90,
        "retired": None, "versions": [version]}))
    redis_client.set(keys.registry_generation(), f"gen-{name}-{spec.mechanism.id}")


def _put_days(redis_client: Any, name: str, spec: MetricSpec) -> dict[str, np.ndarray]:
    """Each day's counters, made by the real client (seeded), written as the day strings the
    ingest script writes; returned by ISO day."""
    today = keys.hour_index(datetime.now(timezone.utc)) // 24
    out = {}
    for ago, population in DAYS.items():
        counters = _counters(spec.mechanism, population, seed=ago)  # type: ignore[arg-type]
        day = today - ago
        redis_client.set(keys.open_counters(name, spec.mechanism.id, day * 24),
                         counters.astype(keys.COUNTER_DTYPE).tobytes())
        out[keys.hour_start(day * 24).date().isoformat()] = counters
    return out


@pytest.mark.parametrize("name", KINDS)
def test_the_presentation_hints_are_the_kinds(name: str) -> None:
    spec, kind = SPECS[name], kind_of(name)
    hints = presentation(spec)
    assert hints["percent"] is kind.percent and hints["slot_word"] == kind.slot_word
    assert hints["contiguous"] is kind.buckets
    assert hints["value_range"] == list(kind.value_range(spec))
    assert hints["digits"] == (4 if kind.percent else 2)
    assert hints["view"] == {"open": "discovery", "categorical": "categories",
                             "histogram": "categories"}.get(name, "series")


@pytest.mark.parametrize("name", ["boolean", "histogram", "numeric"])
def test_the_served_series_carries_the_hints(app, redis_client, name: str) -> None:  # type: ignore[no-untyped-def]
    _register(redis_client, f"hinted_{name}", SPECS[name])
    body = app.test_client().get("/dashboard/data",
                                 query_string={"metric": f"hinted_{name}"}).json
    assert {k: body[k] for k in presentation(SPECS[name])} == presentation(SPECS[name])
    if name == "numeric":
        assert body["value_range"] == [0.0, 5000.0] and body["slot_word"] == "mean"


def test_an_open_metric_without_a_decoder_names_the_report(app, redis_client) -> None:  # type: ignore[no-untyped-def]
    _register(redis_client, "crash_sig", SPECS["open"])
    answer = app.test_client().get("/dashboard/data", query_string={"metric": "crash_sig"})
    assert answer.status_code == 422 and "deniable report" in answer.json["detail"]


@pytest.mark.slow
def test_an_open_metric_shows_what_the_analysis_discovers(app, redis_client) -> None:  # type: ignore[no-untyped-def]
    spec = SPECS["open"]
    _register(redis_client, "crash_sig", spec)
    days = _put_days(redis_client, "crash_sig", spec)
    use_discovery(app, discover_period)
    now = datetime.now(timezone.utc)
    query = {"metric": "crash_sig", "from": (now - timedelta(days=6)).isoformat(),
             "to": now.isoformat()}
    http = app.test_client()
    body = http.get("/dashboard/data", query_string=query).json
    assert body["view"] == "discovery" and body["percent"] is True and body["period"] == "window"
    assert [d["day"] for d in body["days"]] == sorted(days)
    assert [d["n"] for d in body["days"]] == [int(days[d][0]) for d in sorted(days)]
    assert all(d["start"].startswith(d["day"]) for d in body["days"])

    def same(served: dict[str, Any], counters: np.ndarray) -> None:
        want = discover(spec.mechanism, counters, confidence=body["confidence"])  # type: ignore[arg-type]
        assert served["n"] == want.n and served["tested"] == want.tested
        assert served["min_share"] == pytest.approx(want.min_share, rel=1e-12)
        assert [f["string"] for f in served["found"]] == [f.string for f in want.found]
        for got, f in zip(served["found"], want.found):
            assert (got["share"], got["lower"], got["upper"]) == pytest.approx(
                (f.share, f.lower, f.upper), rel=1e-12)
            assert got["lower"] > 0  # only strings whose lower bound is above 0

    same(body["discovery"], sum(days.values()))
    assert {f["string"] for f in body["discovery"]["found"]} >= {"oom", "<b>", "bus!"}
    for day, counters in days.items():
        one = http.get("/dashboard/data", query_string={**query, "day": day}).json
        assert one["period"] == day
        same(one["discovery"], counters)
    missing = http.get("/dashboard/data", query_string={**query, "day": "1999-01-01"})
    assert missing.status_code == 422 and sorted(days)[0] in missing.json["detail"] + \
        json.dumps(missing.json)
    empty = http.get("/dashboard/data", query_string={
        **query, "from": (now - timedelta(days=40)).isoformat(),
        "to": (now - timedelta(days=30)).isoformat()}).json
    assert empty["discovery"] is None and empty["days"] == []


def test_the_cli_wsgi_app_has_the_decoder_and_the_collectors_has_none(  # type: ignore[no-untyped-def]
        redis_url, metrics_file, redis_client, monkeypatch) -> None:
    import importlib
    import sys

    from deniable.collector.dashboard import DISCOVER
    from tests.conftest import OPEN_ENV

    for key, value in {**OPEN_ENV, "DENIABLE_REDIS_URL": redis_url,
                       "DENIABLE_METRICS_FILE": str(metrics_file)}.items():
        monkeypatch.setenv(key, value)
    for name in ("deniable.cli.wsgi", "deniable.collector.wsgi"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    served = importlib.import_module("deniable.cli.wsgi").app
    bare = importlib.import_module("deniable.collector.wsgi").app
    assert served.extensions[DISCOVER] is discover_period and DISCOVER not in bare.extensions
