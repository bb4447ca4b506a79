"""Every chart of the HTML report and of the live dashboard, looked at in headless Chromium:
dated time axes, y-axis titles and units, visible interval bands, a time chart per category,
and an axis on which a five-point shift shows. Screenshots go to the test's tmp dir."""
from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest

from deniable.analysis import analyze, render_html
from deniable.analysis.sources import MetricCounts, MetricInfo
from deniable.client.kinds import MetricSpec
from deniable.client.mechanism import RandomizedResponse
from tests.analysis.test_kinds_outputs import END, START, KindsSource
from tests.e2e.test_dashboard import devtools

SHIFT = MetricSpec("boolean", RandomizedResponse())


class ShiftSource(KindsSource):
    """The kinds' source plus ``shift``: 10,000 devices a day answering yes 50 % of the time,
    55 % from day four (exact expected counts, no noise)."""

    def metrics(self) -> dict[str, MetricInfo]:
        return {**super().metrics(),
                "shift": MetricInfo("shift", "a five-point shift", SHIFT.mechanism, version=1,
                                    spec=SHIFT)}

    def counts(self, metric: str, start: datetime | None = None, end: datetime | None = None,
               *, version: int | None = None) -> MetricCounts:
        if metric != "shift":
            return super().counts(metric, start, end, version=version)
        days = [START + timedelta(days=d, hours=5) for d in range(8)]
        values = np.array([[10_000, int(10_000 * (0.25 + 0.5 * (0.50 if d < 4 else 0.55)))]
                           for d in range(8)])
        return MetricCounts(self.metrics()["shift"], days, values=values)


CHARTS = """
Array.from(document.querySelectorAll("svg.series, svg.timechart, svg.bars, svg.chart")).map(
  svg => {
    const box = svg.getBoundingClientRect();
    return {kind: svg.getAttribute("class"), width: box.width, height: box.height,
      metric: (svg.closest("[data-metric]") || {dataset: {}}).dataset.metric,
      xticks: Array.from(svg.querySelectorAll(".x-tick")).map(t => t.textContent),
      yticks: Array.from(svg.querySelectorAll(".y-tick")).map(t => t.textContent),
      ytitle: (svg.querySelector(".y-title") || {textContent: ""}).textContent,
      xtitle: (svg.querySelector(".x-title") || {textContent: ""}).textContent,
      bands: Array.from(svg.querySelectorAll(".band")).map(b => +(b.getAttribute(
        "fill-opacity") || 1)),
      points: Array.from(svg.querySelectorAll("circle")).map(c => +c.getAttribute("cy"))};
  })
"""


def _look(browser: Any, url: str, shot: Path, opener: str) -> list[dict[str, Any]]:
    """Load ``url``, run ``opener`` (it opens what draws on demand), wait for the charts,
    write a full-page screenshot to ``shot`` and return what CHARTS finds."""
    browser.open(url, "document.readyState === 'complete'")
    browser.evaluate(opener)
    browser.wait_for("document.querySelectorAll('svg').length > 0 && "
                     "(document.body.dataset.ready === undefined || "
                     "document.body.dataset.ready === '1')")
    time.sleep(0.3)
    browser.screenshot(shot, 12000)
    return browser.evaluate(CHARTS)  # type: ignore[no-any-return]


DATE = re.compile(r"^\d\d-\d\d( \d\dh)?$")


def _dated_and_labelled(chart: dict[str, Any]) -> None:
    assert chart["width"] > 300 and chart["height"] > 150, chart
    assert len(chart["yticks"]) >= 2 and chart["ytitle"], chart
    if chart["kind"] in ("bars", "chart bars"):
        return
    dated = [t for t in chart["xticks"] if DATE.match(t)]
    assert len(dated) >= 3 and re.search(r"\(UTC\) \d{4}", chart["xtitle"]), chart
    assert chart["bands"] and min(chart["bands"]) >= 0.2, chart  # the band shows


@pytest.mark.slow
def test_every_report_chart_is_dated_and_labelled_and_shows_a_five_point_shift(  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    result = analyze(ShiftSource(), start=START, end=END, split=START + timedelta(days=4))
    page = tmp_path / "report.html"
    page.write_text(render_html(result.sections, result.comparisons), encoding="utf-8")
    with devtools() as browser:
        charts = _look(browser, page.as_uri(), tmp_path / "report.png",
                       "document.querySelectorAll('details').forEach(d => d.open = true)")
    drawn = {(c["metric"], c["kind"]) for c in charts}
    for metric in ("flag", "shift", "startup_ms"):
        assert (metric, "series") in drawn
    for metric in ("os", "latency"):   # a time chart per category, besides the bars
        assert (metric, "timechart") in drawn and (metric, "bars") in drawn
    for chart in charts:
        _dated_and_labelled(chart)
    numeric = next(c for c in charts if c["metric"] == "startup_ms")
    assert "ms" in numeric["ytitle"]
    assert any(t.endswith(" %") for t in next(c for c in charts if c["metric"] == "flag")
               ["yticks"])
    shift = next(c for c in charts if c["metric"] == "shift")
    # 50 % -> 55 %: the step fills at least a third of the plot's 190 px.
    assert max(shift["points"]) - min(shift["points"]) > 190 / 3, shift["points"]


@pytest.mark.slow
def test_every_dashboard_chart_is_dated_and_labelled(redis_url: str, redis_client: Any,  # type: ignore[no-untyped-def]
                                                     tmp_path: Path) -> None:
    from deniable.collector.server import CollectorProcess
    from deniable.analysis.timeseries import floor
    from tests.cli.test_report_kinds import METRICS, _send
    from tests.conftest import OPEN_ENV

    path = tmp_path / "metrics.toml"
    path.write_text(METRICS)
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as collector:
        _send(collector.url)
        now = datetime.now(timezone.utc)
        start, end = floor(now - timedelta(days=3), "day"), floor(now, "hour") + timedelta(hours=1)
        query = urlencode({"from": start.isoformat(), "to": end.isoformat(), "every": "day"})
        with devtools() as browser:
            charts = _look(browser, f"{collector.url}/dashboard?{query}",
                           tmp_path / "dashboard.png", "0")
    kinds = {c["metric"]: set() for c in charts}
    for c in charts:
        kinds[c["metric"]].add(c["kind"])
        _dated_and_labelled(c)
    assert "chart categories-time" in kinds["os_kind"] and "chart bars" in kinds["os_kind"]
    assert "chart" in kinds["startup_kind"]
    text = re.sub(r"\s+", " ", str(charts))
    assert "+00:00" not in text  # no raw ISO timestamps in what is drawn
