"""The HTML report at scale: an overview row per metric, charts drawn on demand by the page's
own script, and the same numbers as the analysis (checked in a real browser)."""
from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from deniable.analysis import analyze, render_html
from deniable.analysis.report import sparkline
from tests.e2e.test_dashboard import browse

UTC = timezone.utc
START = datetime(2026, 9, 1, tzinfo=UTC)
DAYS = 60


def _source(memory_source, metrics: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    hours = {}
    for m in range(metrics):
        rows = []
        for h in range(0, DAYS * 24, 3):
            n = int(rng.integers(20, 60))
            rows.append((START + timedelta(hours=h), n, int(rng.binomial(n, 0.3 + 0.004 * m))))
        hours[f"m{m:03d}"] = rows
    return memory_source({name: "rr:1/2:1/2" for name in hours}, hours)


class _Overview(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[str] = []
        self.charts: dict[str, dict[str, str]] = {}
        self._metric = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "data-metric" in a:
            self.rows.append(a["data-metric"])
        if tag == "details" and "data-metric" in a:
            self._metric = a["data-metric"]
        if tag == "div" and a.get("class") == "chart":
            self.charts[self._metric] = a


def test_the_report_opens_with_an_overview_and_packs_each_series(memory_source) -> None:  # type: ignore[no-untyped-def]
    analysis = analyze(_source(memory_source, 30), start=START,
                       end=START + timedelta(days=DAYS))
    page = render_html(analysis.sections, analysis.comparisons)
    parsed = _Overview()
    parsed.feed(page)
    assert parsed.rows[:30] == [f"m{m:03d}" for m in range(30)]  # overview first, in order
    assert page.index('<table class="summary"') < page.index('class="metric"')
    for section in analysis.sections:
        chart = parsed.charts[section.summary.metric]
        raw = base64.b64decode(chart["data-series"])
        count = int(chart["data-buckets"])
        assert count == len(section.series) == DAYS
        e = section.series.estimates
        est = np.frombuffer(raw, "<u2", count) / 65535
        assert chart["data-nbytes"] == "2"  # every n fits 16 bits
        n = np.frombuffer(raw, "<u2", count, 6 * count)
        assert n.tolist() == e.n.tolist()
        assert np.allclose(est, e.estimate, atol=1e-5)
    # A few MB for a thousand metrics with a year of days (bench/storage.py measures it):
    # here, 60 days, under 3.2 KB a metric besides "What changed".
    changes = page[page.index("<h2>What changed"):page.index("<h2>Metrics")]
    per_metric = (len(page.encode()) - len(changes.encode())) / 30
    assert per_metric < 3_200  # 2.5 KB before the plain reading and labelled trends (~0.6 KB)


@pytest.mark.slow
def test_a_browser_draws_a_metric_when_it_is_opened(memory_source, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    analysis = analyze(_source(memory_source, 3), start=START, end=START + timedelta(days=DAYS))
    page = tmp_path / "report.html"
    page.write_text(render_html(analysis.sections, analysis.comparisons), encoding="utf-8")
    dom = browse(f"{page.as_uri()}#metric-m001", "--dump-dom")
    opened = dom[dom.index('id="metric-m001"'):dom.index('id="metric-m002"')]
    assert "<svg" in opened and 'class="buckets"' in opened
    closed = dom[dom.index('id="metric-m002"'):]
    assert 'class="buckets"' not in closed  # drawn on demand only
    e = analysis.sections[1].series.estimates
    cells = re.findall(r"<tr><td>(\d{4}-\d\d-\d\d \d\d:\d\d)</td><td>([\d,]+)</td><td>([-\d.]+)</td>",
                       opened)
    assert [int(n.replace(",", "")) for _, n, _ in cells] == e.n.tolist()
    assert [float(v) for _, _, v in cells] == pytest.approx(e.estimate.tolist(), abs=6e-4)


def test_sparklines_sit_on_a_fixed_axis() -> None:
    flat = [0.30, 0.312, 0.291, 0.305, 0.298]  # noise around 0.3
    assert len(set(sparkline(flat))) == 1
    assert sparkline([0.05, 0.95]) == "▁█"
    assert sparkline([0.2, float("nan"), 0.2]) == "▂ ▂"
