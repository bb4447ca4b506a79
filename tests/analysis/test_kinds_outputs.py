"""Every analyst output for categorical, histogram and numeric metrics: summaries, time series,
rolling windows, comparisons (Holm across categories), tables, JSON, CSV, pandas and HTML."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from deniable.analysis import analyze, render_html, rolling, series, summarize, to_frame
from deniable.analysis.compare import ComparisonError, compare_categories, compare_windows
from deniable.analysis.estimate import window_categories
from deniable.analysis.report import render, render_series, series_document
from deniable.analysis.sources import MetricCounts, MetricInfo, SourceError
from deniable.analysis.timeseries import rollup_values
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse

START = datetime(2026, 11, 2, tzinfo=timezone.utc)   # a Monday
END = START + timedelta(days=8)
OS = MetricSpec.build("categorical", epsilon=2.0,
                      categories=["android", "ios", "windows", "macos", "linux", "other"])
LATENCY = MetricSpec.build("histogram", epsilon=1.0, edges=[0, 10, 20, 50, 100, 200, 500, 1000])
STARTUP = MetricSpec.build("numeric", epsilon=1.0, lower=0, upper=5000)
SPECS = {"os": OS, "latency": LATENCY, "startup_ms": STARTUP,
         "flag": MetricSpec("boolean", RandomizedResponse())}
HOURS = [START + timedelta(hours=h) for h in range(0, 24 * 8, 2)]
SHIFT = 96  # from hour 4 * 24 on (day four), ios gains 10 points from android


def truth(name: str, hour: int) -> np.ndarray:
    if name == "os":
        shares = np.array([0.40, 0.25, 0.15, 0.10, 0.07, 0.03])
        return shares + (hour >= SHIFT) * np.array([-0.10, 0.10, 0, 0, 0, 0])
    if name == "latency":
        return np.array([0.05, 0.15, 0.3, 0.25, 0.15, 0.07, 0.03])
    return np.array([])


def perturbed(name: str, n: int, rng: np.random.Generator, hour: int) -> list[int]:
    """One hour's counter slots, drawn from the mechanism's exact channel."""
    spec = SPECS[name]
    p1, q = (float(x) for x in spec.mechanism.channel)
    if name == "startup_ms":
        return [n, int(rng.binomial(n, q + (p1 - q) * 1200 / 5000))]
    if name == "flag":
        return [n, int(rng.binomial(n, q + (p1 - q) * 0.3))]
    rates = q + truth(name, hour) * (p1 - q)
    if spec.mechanism.id.startswith("grr"):
        return [n, *rng.multinomial(n, rates).tolist()]
    return [n, *rng.binomial(n, rates).tolist()]


class KindsSource:
    """A counts source over hour buckets drawn once per metric from a fixed seed."""

    def __init__(self, n: int = 2000) -> None:
        rng = np.random.default_rng(2026)
        self.values = {name: np.array([perturbed(name, n, rng, int((h - START).total_seconds()
                                                                   // 3600)) for h in HOURS])
                       for name in SPECS}

    def metrics(self) -> dict[str, MetricInfo]:
        return {name: MetricInfo(name, f"{name} description", spec.mechanism, version=1,
                                 spec=spec) for name, spec in SPECS.items()}

    def counts(self, metric: str, start: datetime | None = None, end: datetime | None = None,
               *, version: int | None = None) -> MetricCounts:
        return MetricCounts(self.metrics()[metric], HOURS, values=self.values[metric])


@pytest.fixture(scope="module")
def source() -> KindsSource:
    return KindsSource()


def test_metric_info_needs_a_spec_for_non_boolean_mechanisms() -> None:
    with pytest.raises(SourceError):
        MetricInfo("os", "", OS.mechanism)
    assert MetricInfo("flag", "", RandomizedResponse()).spec.kind == "boolean"


def test_counts_keep_every_slot_and_derive_n(source: KindsSource) -> None:
    counts = source.counts("os")
    assert counts.values.shape == (len(HOURS), 7) and counts.width == 7
    assert counts.n.tolist() == [2000] * len(HOURS)
    starts, values = rollup_values(counts, "day", START, END)
    assert len(starts) == 8 and values.sum(axis=0).tolist() == counts.values.sum(axis=0).tolist()


def test_categorical_summary_pools_every_bucket(source: KindsSource) -> None:
    s = summarize(source.counts("os"), start=START, end=END)
    assert s.kind == "categorical" and s.categories is not None and s.n == 2000 * len(HOURS)
    assert s.categories.counts.tolist() == source.values["os"][:, 1:].sum(axis=0).tolist()
    mean_truth = np.mean([truth("os", h) for h in range(0, 24 * 8, 2)], axis=0)
    # Memoized over 8 days: the window interval counts devices, so it is wide enough.
    assert np.all((s.categories.ci_low <= mean_truth) & (mean_truth <= s.categories.ci_high))
    assert s.periods == 8 and "in each category" in s.estimand


def test_numeric_summary_is_the_mean_in_units(source: KindsSource) -> None:
    s = summarize(source.counts("startup_ms"), start=START, end=END)
    assert s.kind == "numeric" and (s.lower, s.upper) == (0.0, 5000.0)
    assert s.ci_low < 1200 < s.ci_high and abs(s.estimate - 1200) < 5 * s.stderr
    assert "mean value of devices" in s.estimand


def test_categorical_series_and_rolling_windows(source: KindsSource) -> None:
    counts = source.counts("os")
    ts = series(counts, "day", START, END)
    assert ts.estimates.estimate.shape == (8, 6) and ts.simultaneous is not None
    assert ts.n.tolist() == [24_000] * 8
    day1 = ts.categories(1)
    assert day1.labels == OS.labels and day1.n == 24_000
    assert np.all(day1.sim_low <= day1.ci_low) and np.all(day1.ci_high <= day1.sim_high)
    rolled = rolling(ts, 8)
    whole = window_categories(counts, START, END)
    assert rolled.values is not None and rolled.values[-1].tolist() == \
        [whole.n, *whole.counts.tolist()]
    assert rolled.estimates.unclipped[-1] == pytest.approx(whole.value)
    assert rolled.simultaneous.ci_high[-1] == pytest.approx(whole.sim_high)  # type: ignore[union-attr]


def test_numeric_series_rolls_up_like_the_summary(source: KindsSource) -> None:
    ts = rolling(series(source.counts("startup_ms"), "day", START, END), 8)
    s = summarize(source.counts("startup_ms"), start=START, end=END)
    assert ts.estimates.estimate[-1] == pytest.approx(s.estimate)
    assert ts.estimates.ci_high[-1] == pytest.approx(s.ci_high)


def test_comparisons_find_the_categories_that_moved_holm_corrected(source: KindsSource) -> None:
    counts = source.counts("os")
    split = START + timedelta(days=4)
    found = compare_categories(counts, (START, split), (split, END))
    assert [c.category for c in found] == list(OS.labels)
    assert all(c.correction == "holm" and c.kind == "categorical" for c in found)
    moved = {c.category for c in found if c.significant}
    assert moved == {"android", "ios"}
    change = {c.category: c.difference for c in found}
    assert change["ios"] == pytest.approx(0.10, abs=0.03)
    assert change["android"] == pytest.approx(-0.10, abs=0.03)
    raw = compare_categories(counts, (START, split), (split, END), correction=None)
    assert all(c.p_adjusted == c.p_value for c in raw)
    with pytest.raises(ComparisonError):
        compare_windows(counts, (START, split), (split, END))


def test_numeric_comparison_is_the_change_of_the_mean(source: KindsSource) -> None:
    split = START + timedelta(days=4)
    c = compare_windows(source.counts("startup_ms"), (START, split), (split, END))
    assert c.kind == "numeric" and c.ci_low < 0 < c.ci_high  # the truth did not change
    assert c.stderr > 10  # in milliseconds, not in shares


def test_tables_json_and_csv_name_both_intervals(source: KindsSource) -> None:
    summaries = [summarize(source.counts(n), start=START, end=END) for n in sorted(SPECS)]
    table = render(summaries, "table", detailed=True)
    assert "95% CI per category" in table and "95% CI simultaneous" in table
    assert "BIASED" not in table
    readable = render(summaries, "table")  # the plain reading: percent and unit, no counts
    assert "share of devices (95 % interval)" in readable and " ms (" in readable
    assert "BIASED" not in readable and "drawn (BIASED)" in render(summaries, "table",
                                                                   projected=True)
    doc = json.loads(render(summaries, "json"))
    os_doc = next(m for m in doc["metrics"] if m["metric"] == "os")
    assert os_doc["kind"] == "categorical" and "simultaneous" in os_doc["intervals"]
    assert [c["category"] for c in os_doc["categories"]] == list(OS.labels)
    assert {"ci_low", "ci_high", "sim_low", "sim_high", "stderr"} <= set(os_doc["categories"][0])
    rows = list(csv.DictReader(io.StringIO(render(summaries, "csv"))))
    assert [r["category"] for r in rows if r["metric"] == "latency"] == list(LATENCY.labels)
    startup = next(r for r in rows if r["metric"] == "startup_ms")
    assert startup["upper"] == "5000.0"
    assert float(startup["total"]) == pytest.approx(int(startup["n"]) * float(startup["estimate"]))
    assert "total over the" in table
    projected = json.loads(render(summaries, "json", projected=True))
    os_doc = next(m for m in projected["metrics"] if m["metric"] == "os")
    assert "BIASED" in os_doc["projection"]
    assert sum(c["projected_biased"] for c in os_doc["categories"]) == pytest.approx(1.0)
    assert "projected (BIASED)" in render(summaries, "table", projected=True, detailed=True)


def test_series_outputs_and_pandas(source: KindsSource) -> None:
    ts = series(source.counts("latency"), "day", START, END)
    doc = series_document(ts)
    assert doc["kind"] == "histogram" and doc["categories"] == list(LATENCY.labels)
    assert len(doc["buckets"]) == 8 and len(doc["buckets"][0]["categories"]) == 7
    assert "sim_high" in doc["buckets"][0]["categories"][0]
    frame = to_frame(ts)
    assert len(frame) == 8 * 7 and set(frame["category"]) == set(LATENCY.labels)
    assert (frame["sim_low"] <= frame["ci_low"]).all()
    assert "latency" in render_series([ts], "table")
    numeric = series(source.counts("startup_ms"), "day", START, END)
    assert "(mean)" in render_series([numeric], "table", detailed=True)
    assert " ms (mean)" in render_series([numeric], "table")  # the axis' ends, in its unit
    assert series_document(numeric)["upper"] == 5000.0
    summary = to_frame(summarize(source.counts("os"), start=START, end=END))
    assert list(summary["category"]) == list(OS.labels)


def test_analysis_and_html_report_cover_every_kind(source: KindsSource) -> None:
    result = analyze(source, start=START, end=END, split=START + timedelta(days=4))
    labels = [c.label for c in result.comparisons]
    assert "os: ios" in labels and "flag" in labels and "startup_ms" in labels
    # Holm in each metric's own family (its categories together); a boolean's alone.
    assert {c.correction for c in result.comparisons} == {"holm"}
    flag = next(c for c in result.comparisons if c.label == "flag")
    assert flag.p_adjusted == flag.p_value
    page = render_html(result.sections, result.comparisons)
    assert page.count('<svg class="bars"') == 2          # os and latency
    assert "simultaneous 95% interval" in page and "BIASED" not in page
    assert 'data-lower="0.0" data-upper="5000.0"' in page
    assert page.count('<tr data-category=') == 6 + 7 and "share over time" in page
    assert "Every device sends one bit per category" in page or "one of the 6 categories" in page
