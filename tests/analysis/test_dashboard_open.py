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


def _register_versions(redis_client: Any, name: str, versions: list[tuple[MetricSpec, str]]
                       ) -> None:
    """A live-registry entry with one version per (spec, period), the last the current."""
    stored = [{"version": i + 1, "mechanism": spec.mechanism.id,
               "registered": f"2026-11-0{i + 1}T00:00:00+00:00", "memoization": "fresh",
               "instantaneous": None, "period": period, **spec.describe()}
              for i, (spec, period) in enumerate(versions)]
    redis_client.hset(keys.registry(), name, json.dumps({
        "name": name, "description": f"{name} description", "retention_days": 90,
        "retired": None, "versions": stored}))
    redis_client.set(keys.registry_generation(), f"gen-{name}-{len(versions)}")


def _parameters(problem: dict[str, Any]) -> dict[str, str]:
    """The query parameters a problem document names, with their details."""
    return {e["parameter"]: e["detail"] for e in problem.get("errors", []) if "parameter" in e}


def _range(days: int = 6) -> dict[str, str]:
    now = datetime.now(timezone.utc)
    return {"from": (now - timedelta(days=days)).isoformat(), "to": now.isoformat()}


def test_a_string_is_followed_over_time_with_the_decoders_share_in_each_period(  # type: ignore[no-untyped-def]
        app, redis_client) -> None:
    from statistics import NormalDist

    from deniable.analysis.discovery import track
    from deniable.cli.serve import track_period

    spec = SPECS["open"]
    _register(redis_client, "crash_sig", spec)
    days = _put_days(redis_client, "crash_sig", spec)
    use_discovery(app, discover_period, track_period)
    body = app.test_client().get("/dashboard/data", query_string={
        "metric": "crash_sig", "string": "oom", **_range()}).json
    trend = body["trend"]
    z = NormalDist().inv_cdf(1 - 0.05 / (2 * len(days)))  # simultaneous over the 2 days
    assert trend["string"] == "oom" and trend["z"] == pytest.approx(z, rel=1e-12)
    assert [p["day"] for p in trend["periods"]] == sorted(days)
    for served in trend["periods"]:
        counters = days[served["day"]]
        pooled, share, stderr = track(spec.mechanism, counters, "oom")  # type: ignore[arg-type]
        assert served["n"] == int(counters[0]) and served["pooled"] == pooled
        assert (served["share"], served["lower"], served["upper"]) == pytest.approx(
            (share, share - z * stderr, share + z * stderr), rel=1e-12)
        # The same score the period's decode gives the string when it discovers it.
        found = {f.string: f for f in discover(spec.mechanism, counters).found}  # type: ignore[arg-type]
        assert served["share"] == pytest.approx(found["oom"].share, rel=1e-12)
        assert served["lower"] > 0  # "oom" is 8-18 % of each day: well above 0


def test_a_string_no_device_could_send_is_refused_naming_string(app, redis_client) -> None:  # type: ignore[no-untyped-def]
    from deniable.cli.serve import track_period

    _register(redis_client, "crash_sig", SPECS["open"])
    _put_days(redis_client, "crash_sig", SPECS["open"])
    use_discovery(app, discover_period, track_period)
    for bad in ("", "longer than four bytes"):
        answer = app.test_client().get("/dashboard/data", query_string={
            "metric": "crash_sig", "string": bad, **_range()})
        assert answer.status_code == 422 and "string" in _parameters(answer.json)


def test_closed_periods_are_decoded_once_and_the_current_one_afresh(  # type: ignore[no-untyped-def]
        app, redis_client) -> None:
    from deniable.cli.serve import track_period

    spec = SPECS["open"]
    _register(redis_client, "crash_sig", spec)
    days = _put_days(redis_client, "crash_sig", spec)  # 1 and 3 days ago: closed
    use_discovery(app, discover_period, track_period)
    http = app.test_client()
    query = {"metric": "crash_sig", **_range()}
    day = sorted(days)[-1]
    first = http.get("/dashboard/data", query_string={**query, "day": day}).json
    again = http.get("/dashboard/data", query_string={**query, "day": day}).json
    assert first["cost"]["cache_hits"] == 0 and first["cost"]["bytes_read"] == \
        4 * spec.mechanism.width
    assert again["cost"] == {**again["cost"], "cache_hits": 1, "bytes_read": 0,
                             "periods_read": 0}
    assert again["discovery"] == first["discovery"]
    window = [http.get("/dashboard/data", query_string=query).json for _ in range(2)]
    assert window[1]["cost"]["bytes_read"] == 0 and window[1]["discovery"] == \
        window[0]["discovery"]
    # Counters deleted and filled again (another n): the old entry is never served.
    name = keys.open_counters("crash_sig", spec.mechanism.id,
                              keys.hour_index(datetime.fromisoformat(day + "T00:00:00+00:00")))
    refilled = _counters(spec.mechanism, {"gc": 2000, "oom": 100}, seed=9)  # type: ignore[arg-type]
    redis_client.set(name, refilled.astype(keys.COUNTER_DTYPE).tobytes())
    fresh = http.get("/dashboard/data", query_string={**query, "day": day}).json
    assert fresh["cost"]["cache_hits"] == 0 and fresh["discovery"]["n"] == int(refilled[0])
    # Today's period is open: read and decoded on every request.
    today = keys.hour_index(datetime.now(timezone.utc)) // 24 * 24
    redis_client.set(keys.open_counters("crash_sig", spec.mechanism.id, today),
                     days[day].astype(keys.COUNTER_DTYPE).tobytes())
    label = keys.hour_start(today).date().isoformat()
    for _ in range(2):
        now = http.get("/dashboard/data", query_string={**query, "day": label}).json
        assert now["cost"]["cache_hits"] == 0 and now["cost"]["periods_read"] == 1
        assert [d["closed"] for d in now["days"]] == [True, True, False]
    trend = [http.get("/dashboard/data", query_string={**query, "string": "oom"}).json
             for _ in range(2)]
    assert trend[0]["cost"]["periods_read"] == 3  # the two closed ones, the first time
    assert trend[1]["cost"]["periods_read"] == 1 and trend[1]["trend"] == trend[0]["trend"]


def test_the_decoded_cache_drops_the_least_recently_used_beyond_its_bytes() -> None:
    from deniable.collector.open_view import DecodedCache

    cache = DecodedCache(max_bytes=200)
    for i in range(3):
        cache.put(("k", i), {"found": "x" * 40})  # about 60 bytes each with the key
    assert cache.get(("k", 0)) is not None  # now the most recently used
    cache.put(("k", 3), {"found": "x" * 40})
    assert cache.get(("k", 1)) is None and cache.get(("k", 0)) is not None
    assert cache.bytes <= 200 and len(cache) == 3
    cache.put(("big",), {"found": "x" * 500})  # larger than the whole cache: not kept
    assert cache.get(("big",)) is None and len(cache) == 3


def test_a_period_is_closed_once_its_end_is_past_the_grace() -> None:
    from deniable.collector.open_view import closed

    day = 20_000 * 24  # an hour index at a UTC midnight
    end = (day + 24) * 3600
    assert not closed(day, "day", end + 299, 300) and closed(day, "day", end + 300, 300)
    assert closed(day, "hour", (day + 1) * 3600 + 300, 300)
    assert not closed(day, "week", end + 300, 300)


def test_a_range_over_the_read_budget_answers_422_naming_from_and_to(  # type: ignore[no-untyped-def]
        app, redis_client) -> None:
    from deniable.cli.serve import track_period
    from deniable.collector.open_view import OpenViewLimits

    spec = SPECS["open"]
    _register(redis_client, "crash_sig", spec)
    days = _put_days(redis_client, "crash_sig", spec)
    use_discovery(app, discover_period, track_period,
                  OpenViewLimits(read_bytes=4 * spec.mechanism.width))  # one period
    http = app.test_client()
    answer = http.get("/dashboard/data", query_string={"metric": "crash_sig", **_range()})
    assert answer.status_code == 422
    assert set(_parameters(answer.json)) == {"from", "to"}
    assert "at most 1 days with reports" in _parameters(answer.json)["from"]
    assert "2 days with reports" in answer.json["detail"]
    # The default range (no from/to) is shortened to the latest period instead, and says so.
    body = http.get("/dashboard/data", query_string={"metric": "crash_sig"}).json
    assert body["shortened"] is True and [d["day"] for d in body["days"]] == [max(days)]
    assert body["discovery"]["n"] == int(days[max(days)][0])
    assert body["cost"]["bytes_read"] <= 4 * spec.mechanism.width


def test_an_open_metrics_versions_are_listed_and_each_is_shown_alone(  # type: ignore[no-untyped-def]
        app, redis_client) -> None:
    old, new = MetricSpec.build("open", epsilon=2.0, max_bytes=4), SPECS["open"]
    _register_versions(redis_client, "crash_sig", [(old, "day"), (new, "day")])
    older = _put_days(redis_client, "crash_sig", old)
    newer = _put_days(redis_client, "crash_sig", new)
    use_discovery(app, discover_period)
    http = app.test_client()
    query = {"metric": "crash_sig", **_range()}
    body = http.get("/dashboard/data", query_string=query).json
    assert [(v["version"], v["mechanism"]) for v in body["versions"]] == [
        (1, old.mechanism.id), (2, new.mechanism.id)]
    assert body["version"] == body["current_version"] == 2 and body["joins_versions"] is False
    assert body["discovery"]["n"] == sum(int(c[0]) for c in newer.values())
    first = http.get("/dashboard/data", query_string={**query, "version": 1}).json
    assert first["version"] == 1 and first["mechanism"] == old.mechanism.id
    assert first["epsilon"] == pytest.approx(old.mechanism.epsilon)
    assert first["discovery"]["n"] == sum(int(c[0]) for c in older.values())
    want = discover(old.mechanism, sum(older.values()))  # type: ignore[arg-type]
    assert [f["string"] for f in first["discovery"]["found"]] == [f.string for f in want.found]
    missing = http.get("/dashboard/data", query_string={**query, "version": 7})
    assert missing.status_code == 404 and "version" in _parameters(missing.json)


def test_a_weekly_metric_lists_weeks_from_their_monday(app, redis_client) -> None:  # type: ignore[no-untyped-def]
    spec = SPECS["open"]
    _register_versions(redis_client, "weekly_sig", [(spec, "week")])
    now = datetime.now(timezone.utc)
    this_week = keys.period_hour(keys.hour_index(now), "week")
    for weeks_ago, seed in ((1, 1), (3, 3)):
        counters = _counters(spec.mechanism, DAYS[seed], seed=seed)  # type: ignore[arg-type]
        redis_client.set(keys.open_counters("weekly_sig", spec.mechanism.id,
                                            this_week - 168 * weeks_ago, "week"),
                         counters.astype(keys.COUNTER_DTYPE).tobytes())
    use_discovery(app, discover_period)
    body = app.test_client().get("/dashboard/data", query_string={
        "metric": "weekly_sig", **_range(days=30)}).json
    assert body["granularity"] == "week" and len(body["days"]) == 2
    for d in body["days"]:
        start, end = (datetime.fromisoformat(d[k]) for k in ("start", "end"))
        assert start.weekday() == 0 and end - start == timedelta(days=7)
        assert d["label"] == f"week of {start.date().isoformat()}" and d["day"] == \
            start.date().isoformat()
