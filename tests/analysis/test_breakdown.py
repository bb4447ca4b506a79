"""Breakdowns by public dimension: estimates per value, small-cell suppression at exactly the
threshold, "not stated", Holm-corrected comparisons, every metric kind, from a real Redis."""
from __future__ import annotations

import json
import math
import secrets
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from deniable.analysis import RedisSource
from deniable.analysis.breakdown import (DEFAULT_MIN_REPORTS, BreakdownError, breakdown,
                                         cell_row)
from deniable.analysis.compare import holm
from deniable.analysis.sources import MetricCounts, MetricInfo, SourceError
from deniable.client.dimensions import Dimensions
from deniable.client.kinds import MetricSpec
from deniable.client.wire import decode_batch, encode_batch
from deniable.core import keys
from deniable.collector.store import Store

BOOLEAN = MetricSpec.build("boolean", mechanism="rr:1/2:1/2")
OS = MetricSpec.build("categorical", epsilon=2.0, categories=["android", "ios", "linux"])
LOAD = MetricSpec.build("histogram", epsilon=2.0, edges=[0, 10, 100])
STARTUP = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=10)
DIMS = Dimensions.parse({"platform": {"values": ["android", "ios", "web"]},
                         "app_version": {"values": ["2.3", "2.4"], "other": True}},
                        [["app_version", "platform"]])
NOW = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
HOUR = NOW - timedelta(hours=3)
RANGE = (NOW - timedelta(days=1), NOW + timedelta(hours=1))


class SeriesSource:
    """counts() and breakdown_counts() over pooled rows given by hand: {label: row} (slot 0
    is n), the total's row under None."""

    def __init__(self, spec: MetricSpec, rows: dict[str | None, tuple[int, ...]],
                 dims: Dimensions = DIMS) -> None:
        self.info = MetricInfo("m", "m description", spec.mechanism, spec=spec, version=1,
                               dimensions=dims)
        self.rows = rows

    def _counts(self, row: tuple[int, ...] | None) -> MetricCounts:
        if row is None or row[0] == 0:
            return MetricCounts(self.info, np.zeros(0, np.int64),
                                values=np.zeros((0, self.info.mechanism.width), np.int64))
        return MetricCounts(self.info, np.array([keys.hour_index(HOUR)]),
                            values=np.array([row], np.int64))

    def dimensions(self, metric: str) -> Dimensions:
        return self.info.dimensions

    def counts(self, metric: str, start: Any = None, end: Any = None, *,
               version: Any = None) -> MetricCounts:
        return self._counts(self.rows[None])

    def breakdown_counts(self, metric: str, by: str, start: Any = None,
                         end: Any = None, *, version: Any = None) -> dict[str, MetricCounts]:
        return {label: self._counts(self.rows.get(label))
                for label in self.info.dimensions.all_series(by)}


def rr_share(n: int, ones: int) -> float:
    """The two-coin randomized response's debiased share: P(1|1) = 3/4, P(1|0) = 1/4."""
    return (ones / n - 0.25) / 0.5


def test_a_cell_of_exactly_k_reports_is_shown_and_one_of_k_minus_1_is_suppressed() -> None:
    source = SeriesSource(BOOLEAN, {None: (230, 120), "platform=android": (100, 60),
                                    "platform=ios": (99, 50), "platform=web": (1, 1)})
    b = breakdown(source, "m", "platform", *RANGE, min_reports=100)
    android, ios, web = b.cells
    assert (android.value, android.n, android.suppressed, android.reason) == \
        ("android", 100, False, "")
    assert android.summary is not None and android.summary.estimate == pytest.approx(0.7)
    assert (ios.n, ios.suppressed, ios.summary) == (99, True, None)
    assert ios.reason == ("fewer than 100 devices (99 in its busiest day, 99 reports): such "
                          "an estimate is mostly noise and a tiny cell can single people out")
    assert web.suppressed and web.summary is None
    assert "2 cells suppressed, ios (n = 99, 99 devices), web (n = 1, 1 device)" in b.note
    assert "mostly noise" in b.note and "single people out" in b.note
    assert b.not_stated == 230 - 100 - 99 - 1
    assert b.comparisons == ()  # one shown cell: nothing to compare, never a suppressed one
    assert cell_row(b, ios)["estimate"] is None and cell_row(b, ios)["suppressed"] is True


def test_the_default_threshold_is_100_and_must_be_at_least_1() -> None:
    assert DEFAULT_MIN_REPORTS == 100
    source = SeriesSource(BOOLEAN, {None: (150, 75), "platform=android": (150, 75)})
    assert not breakdown(source, "m", "platform").cells[0].suppressed
    for bad in (0, -1, 2.5, True):
        with pytest.raises(BreakdownError, match="min_reports"):
            breakdown(source, "m", "platform", min_reports=bad)  # type: ignore[arg-type]


def test_boolean_estimates_per_value_are_the_hand_computed_shares() -> None:
    rows = {"platform=android": (400, 260), "platform=ios": (200, 70), "platform=web": (100, 50)}
    source = SeriesSource(BOOLEAN, {None: (800, 420), **rows})
    b = breakdown(source, "m", "platform", *RANGE, min_reports=100)
    for cell in b.cells:
        n, ones = rows[cell.label]
        r = ones / n
        assert cell.summary is not None
        assert cell.summary.estimate == pytest.approx(rr_share(n, ones))
        assert cell.summary.stderr == pytest.approx(math.sqrt(r * (1 - r) / n) / 0.5)
        assert cell.summary.ci_low < cell.summary.estimate < cell.summary.ci_high
    assert b.not_stated == 100
    assert b.total.n == 800


def test_comparisons_cover_every_pair_of_shown_cells_holm_corrected() -> None:
    rows = {"platform=android": (400, 260), "platform=ios": (200, 70), "platform=web": (100, 50)}
    b = breakdown(SeriesSource(BOOLEAN, {None: (700, 380), **rows}), "m", "platform",
                  min_reports=100)
    pairs = [(c.a, c.b) for c in b.comparisons]
    assert pairs == [("platform=android", "platform=ios"), ("platform=android", "platform=web"),
                     ("platform=ios", "platform=web")]
    ios_vs_android = b.comparisons[0]
    d = rr_share(200, 70) - rr_share(400, 260)
    assert ios_vs_android.difference == pytest.approx(d)
    se = math.hypot(math.sqrt(0.65 * 0.35 / 400) / 0.5, math.sqrt(0.35 * 0.65 / 200) / 0.5)
    assert ios_vs_android.stderr == pytest.approx(se)
    assert [c.p_adjusted for c in b.comparisons] == \
        pytest.approx(holm([c.p_value for c in b.comparisons]))
    assert all(c.correction == "holm" for c in b.comparisons)
    assert ios_vs_android.significant  # 0.8 vs 0.2: z is about 14


def test_categorical_cells_give_shares_per_category_and_compare_each_category() -> None:
    mech = OS.mechanism
    p = math.exp(2) / (math.exp(2) + 2)
    q = 1 / (math.exp(2) + 2)
    rows = {"platform=android": (300, 200, 60, 40), "platform=ios": (300, 40, 220, 40)}
    b = breakdown(SeriesSource(OS, {None: (600, 240, 280, 80), **rows}), "m", "platform",
                  min_reports=100)
    android = b.cells[0].summary
    assert android is not None and android.categories is not None
    assert android.categories.value.tolist() == pytest.approx(
        [(c / 300 - q) / (p - q) for c in (200, 60, 40)])
    assert mech.width == 4
    # 1 pair x 3 categories, corrected together; web (n = 0) is suppressed, never compared.
    assert [(c.category, c.a, c.b) for c in b.comparisons] == [
        (cat, "platform=android", "platform=ios") for cat in ("android", "ios", "linux")]
    assert [c.p_adjusted for c in b.comparisons] == \
        pytest.approx(holm([c.p_value for c in b.comparisons]))
    assert b.cells[2].suppressed and b.cells[2].n == 0


def test_numeric_cells_give_the_mean_in_units() -> None:
    e = math.e
    rows = {"platform=android": (200, 150), "platform=ios": (200, 60)}
    b = breakdown(SeriesSource(STARTUP, {None: (400, 210), **rows}), "m", "platform",
                  min_reports=100)
    for cell in b.cells[:2]:
        n, ones = rows[cell.label]
        # 1BitMean: P(1) = 1/(e^eps + 1) + x/10 * (e^eps - 1)/(e^eps + 1), eps = 1
        x = (ones / n * (e + 1) - 1) / (e - 1) * 10
        assert cell.summary is not None and cell.summary.unclipped == pytest.approx(x)
        assert (cell.summary.lower, cell.summary.upper) == (0, 10)


def test_a_declared_combination_breaks_down_by_both_values() -> None:
    rows = {"app_version=2.4,platform=ios": (150, 100)}
    b = breakdown(SeriesSource(BOOLEAN, {None: (300, 150), **rows}), "m",
                  "platform,app_version", min_reports=100)
    assert b.by == "app_version,platform"
    assert len(b.cells) == 3 * 3  # (2.3, 2.4, other) x (android, ios, web)
    shown = [c for c in b.cells if not c.suppressed]
    assert [(c.values, c.value) for c in shown] == \
        [({"app_version": "2.4", "platform": "ios"}, "2.4, ios")]
    assert b.not_stated == 150


def test_a_dimension_the_metric_does_not_declare_is_refused_by_name() -> None:
    source = SeriesSource(BOOLEAN, {None: (10, 5)})
    with pytest.raises(BreakdownError, match="'channel' is not a dimension.*platform"):
        breakdown(source, "m", "channel")
    with pytest.raises(BreakdownError, match="declares no dimensions"):
        breakdown(SeriesSource(BOOLEAN, {None: (10, 5)}, Dimensions()), "m", "platform")


# -- from a real Redis, through the collector's own decode and write path --------------------

def _register(redis_client, name: str, spec: MetricSpec, dims: Dimensions) -> None:  # type: ignore[no-untyped-def]
    """A registry entry in Redis carrying the metric's dimensions (``Dimensions.describe``)."""
    version = {"version": 1, "mechanism": spec.mechanism.id,
               "registered": "2026-11-01T00:00:00+00:00", "memoization": "memoized",
               "instantaneous": None, "period": "day", **spec.describe()}
    redis_client.hset(keys.registry(), name, json.dumps({
        "name": name, "description": f"{name} description", "retention_days": 90,
        "retired": None, "versions": [version], **dims.describe()}))
    redis_client.set(keys.registry_generation(), f"gen-{secrets.token_hex(4)}")


def _ingest(redis_client, name: str, spec: MetricSpec, dims: Dimensions,  # type: ignore[no-untyped-def]
            reports: list[tuple[int, dict[str, str] | None]]) -> None:
    """Decode batches of (perturbed value, dims) reports with the metric's dimensions and add
    them with ``Store.add_batch``, 500 reports a batch."""
    store = Store(redis_client)
    for at in range(0, len(reports), 500):
        doc = encode_batch(secrets.token_hex(16), [
            (name, spec.mechanism.id, value, *([d] if d else []))
            for value, d in reports[at:at + 500]])
        batch = decode_batch(doc, {name: spec.mechanism.id}, dimensions={name: dims})
        store.add_batch(batch, HOUR, {name: 90}, 3600)


def _reports(values: list[int], dims: dict[str, str] | None) -> list[tuple[int, Any]]:
    return [(v, dims) for v in values]


@pytest.mark.parametrize("spec", [BOOLEAN, OS, LOAD, STARTUP],
                         ids=["boolean", "categorical", "histogram", "numeric"])
def test_every_kind_breaks_down_from_a_real_redis(redis_client, redis_url, spec) -> None:  # type: ignore[no-untyped-def]
    name = f"bd_{spec.kind}"
    _register(redis_client, name, spec, DIMS)
    rng = np.random.default_rng(7)
    width = spec.mechanism.width
    top = 2 if width == 2 else width - 1   # a bit, or a category index
    android = rng.integers(0, top, 120).tolist()
    ios = rng.integers(0, top, 99).tolist()
    silent = rng.integers(0, top, 30).tolist()
    _ingest(redis_client, name, spec, DIMS,
            _reports(android, {"platform": "android", "app_version": "2.4"})
            + _reports(ios, {"platform": "ios", "app_version": "9.9"})   # other
            + _reports(silent, None))
    source = RedisSource(redis_url)
    assert source.dimensions(name) == DIMS
    assert source.metrics()[name].dimensions == DIMS
    b = breakdown(source, name, "platform", *RANGE, min_reports=100)
    assert [(c.label, c.n, c.suppressed) for c in b.cells] == [
        ("platform=android", 120, False), ("platform=ios", 99, True), ("platform=web", 0, True)]
    assert b.not_stated == 30 and b.total.n == 249 and b.kind == spec.kind
    shown = b.cells[0].summary
    assert shown is not None
    expected = np.bincount(android, minlength=top)
    if width == 2:
        assert shown.ones == int(expected[1])
    else:
        assert shown.categories is not None
        assert shown.categories.counts.tolist() == expected.tolist()
    versions = breakdown(source, name, "app_version", *RANGE, min_reports=99)
    assert [(c.value, c.n, c.suppressed) for c in versions.cells] == [
        ("2.3", 0, True), ("2.4", 120, False), ("other", 99, False)]
    assert len(versions.comparisons) == (1 if width == 2 else top)
    series = source.series_counts(name, "app_version=other", *RANGE)
    assert int(series.n.sum()) == 99


def test_redis_breakdown_reads_every_series_in_one_round_trip(redis_client, redis_url,  # type: ignore[no-untyped-def]
                                                              monkeypatch) -> None:
    _register(redis_client, "bd_trips", BOOLEAN, DIMS)
    _ingest(redis_client, "bd_trips", BOOLEAN, DIMS, _reports([1] * 5, {"platform": "web"}))
    source = RedisSource(redis_url)
    source.metrics()
    calls = []
    real = Store.month_strings_by_series

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args[2])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Store, "month_strings_by_series", counted)
    found = source.breakdown_counts("bd_trips", "platform", *RANGE)
    assert calls == [["platform=android", "platform=ios", "platform=web"]]
    assert {k: int(v.n.sum()) for k, v in found.items()} == \
        {"platform=android": 0, "platform=ios": 0, "platform=web": 5}
    with pytest.raises(SourceError, match="not a dimension"):
        source.breakdown_counts("bd_trips", "channel", *RANGE)


def test_a_breakdown_frames_one_row_per_cell_and_category_then_not_stated() -> None:
    rows = {"platform=android": (300, 200, 60, 40), "platform=ios": (99, 40, 20, 39)}
    b = breakdown(SeriesSource(OS, {None: (420, 250, 90, 80), **rows}), "m", "platform",
                  min_reports=100)
    from deniable.analysis import to_frame

    frame = to_frame(b)
    assert list(frame["value"]) == ["android"] * 3 + ["ios", "web", "not stated"]
    assert list(frame["category"][:3]) == ["android", "ios", "linux"]
    assert list(frame["suppressed"]) == [False] * 3 + [True, True, False]
    assert frame["estimate"][3:].isna().all()
    assert list(frame["n"]) == [300] * 3 + [99, 0, 21]


class DailySource(SeriesSource):
    """Seven days of the same devices: each cell's row repeats once a day."""

    def _counts(self, row: tuple[int, ...] | None) -> MetricCounts:
        if row is None or row[0] == 0:
            return super()._counts(row)
        days = [keys.hour_index(HOUR - timedelta(days=d)) for d in range(6, -1, -1)]
        return MetricCounts(self.info, np.array(days), values=np.array([row] * 7, np.int64))


def test_a_small_cell_is_hidden_in_the_one_day_and_the_seven_day_view_alike() -> None:
    # 60 devices on "web" every day: 420 reports over 7 days, still 60 devices.
    rows = {None: (1_060, 600), "platform=android": (1_000, 560), "platform=web": (60, 40)}
    week = breakdown(DailySource(BOOLEAN, rows), "m", "platform",
                     NOW - timedelta(days=7), NOW + timedelta(hours=1), min_reports=100)
    day = breakdown(SeriesSource(BOOLEAN, rows), "m", "platform", *RANGE, min_reports=100)
    for b, reports in ((week, 420), (day, 60)):
        web = next(c for c in b.cells if c.values == {"platform": "web"})
        assert web.suppressed and web.summary is None and web.devices == 60, b
        assert web.n == reports and "60 in its busiest day" in web.reason
        android = next(c for c in b.cells if c.values == {"platform": "android"})
        assert not android.suppressed and android.devices == 1_000


def test_the_device_count_is_the_busiest_period_in_python_and_numpy_alike() -> None:
    from deniable.client.period import CollectionPolicy
    from deniable.core.window import window_devices

    rng = np.random.default_rng(7)
    hours = np.sort(rng.choice(24 * 60, 300, replace=False)) + 24 * 20_000
    n = rng.integers(1, 50, 300)
    for period in ("hour", "day", "week"):
        policy = CollectionPolicy(period=period)
        by_hand: dict[int, int] = {}
        for h, k in zip(hours.tolist(), n.tolist()):
            key = (h + (72 if period == "week" else 0)) // {"hour": 1, "day": 24, "week": 168}[period]
            by_hand[key] = by_hand.get(key, 0) + k
        assert window_devices(hours.tolist(), n.tolist(), policy) == max(by_hand.values())
        assert window_devices(hours, n, policy, xp=np) == max(by_hand.values())
    assert window_devices([], [], CollectionPolicy(), xp=np) == 0
