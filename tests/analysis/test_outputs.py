"""Every output format carries the same numbers and flags: JSON, CSV, DataFrame, HTML, table."""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime, timezone
from html.parser import HTMLParser

import pytest

from deniable.analysis import analyze, render_html, series, to_frame
from deniable.analysis.report import render_series, render_series_table

UTC = timezone.utc
START, END = datetime(2026, 11, 16, tzinfo=UTC), datetime(2026, 11, 19, tzinfo=UTC)
# Day 16: 300/1000 -> 0.1. Day 17: none. Day 18: 20/100 -> -0.1, clipped to 0.
HOURS = {"m": [(datetime(2026, 11, 16, 9, tzinfo=UTC), 600, 180),
               (datetime(2026, 11, 16, 20, tzinfo=UTC), 400, 120),
               (datetime(2026, 11, 18, 3, tzinfo=UTC), 100, 20)]}


@pytest.fixture()
def ts(memory_source):  # type: ignore[no-untyped-def]
    return series(memory_source({"m": "rr:1/2:1/2"}, HOURS).counts("m"), "day", START, END)


def test_json_series_has_the_numbers_and_flags(ts) -> None:  # type: ignore[no-untyped-def]
    doc = json.loads(render_series([ts], "json"))["series"][0]
    b = doc["buckets"]
    assert [x["n"] for x in b] == [1000, 0, 100]
    assert b[0]["estimate"] == pytest.approx(0.1) and b[0]["ci_low"] == pytest.approx(0.0448137)
    assert b[1]["estimate"] is None and b[1]["flags"] == "no reports"
    assert b[2]["estimate"] == 0.0 and b[2]["clipped"] and "clipped" in b[2]["flags"]


def test_csv_series_has_the_numbers_and_flags(ts) -> None:  # type: ignore[no-untyped-def]
    rows = list(csv.DictReader(io.StringIO(render_series([ts], "csv"))))
    assert [int(r["n"]) for r in rows] == [1000, 0, 100]
    assert float(rows[0]["ci_high"]) == pytest.approx(0.1582477, abs=1e-7)
    assert rows[1]["estimate"] == "" and rows[2]["clipped"] == "True"


def test_to_frame_has_the_numbers_and_flags(ts) -> None:  # type: ignore[no-untyped-def]
    frame = to_frame(ts)
    assert frame["n"].tolist() == [1000, 0, 100]
    assert frame["estimate"].iloc[0] == pytest.approx(0.1)
    assert frame["estimate"].isna().tolist() == [False, True, False]
    assert frame["clipped"].tolist() == [False, False, True]
    assert str(frame["start"].dt.tz) == "UTC"


def test_terminal_table_has_the_numbers_and_flags(ts) -> None:  # type: ignore[no-untyped-def]
    text = render_series_table([ts], detailed=True)
    assert "1,000" in text and "0.1000" in text and "[0.0448, 0.1582]" in text
    assert "no reports" in text and "clipped (unclipped -0.1000)" in text


def test_the_plain_table_reads_in_percent_and_says_its_notes_once(ts) -> None:  # type: ignore[no-untyped-def]
    text = render_series_table([ts, ts])
    assert "10 % (4–16 %)" in text and "1,000" in text and "no reports" in text
    assert "raw" not in text.split("How to read")[0]  # no perturbed rate before the notes
    assert "0.1000" not in text and "e-" not in text
    assert text.count("How to read this") == 1  # the notes once per report, not per metric


class _Cells(HTMLParser):
    """Collects data-field cells of the summary tables, and every src/href."""

    def __init__(self) -> None:
        super().__init__()
        self.summary: dict[str, str] = {}
        self.links: list[str] = []
        self._table = ""
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href", "xlink:href") and v]
        if tag == "table":
            self._table = a.get("class") or ""
        if tag == "td" and self._table == "summary":
            self._field = a.get("data-field")
            for key in ("data-value", "data-ci-low", "data-ci-high"):
                if key in a:
                    self.summary[key] = a[key] or ""

    def handle_data(self, data: str) -> None:
        if self._field:
            self.summary[self._field] = self.summary.get(self._field, "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._field = None


def test_html_report_summary_table_numbers_and_no_external_links(memory_source) -> None:  # type: ignore[no-untyped-def]
    src = memory_source({"m": "rr:1/2:1/2"}, HOURS)
    analysis = analyze(src, start=START, end=END, split=datetime(2026, 11, 18, tzinfo=UTC))
    page = render_html(analysis.sections, analysis.comparisons)
    cells = _Cells()
    cells.feed(page)
    # Pooled: 320 ones of 1100 -> rate 0.290909, estimate 2 * 0.290909 - 0.5 = 0.081818.
    assert cells.summary["n"] == "1,100"
    assert float(cells.summary["data-value"]) == pytest.approx(0.0818, abs=1e-4)
    s = analysis.sections[0].summary
    assert float(cells.summary["data-ci-low"]) == pytest.approx(s.ci_low, rel=1e-5)
    # The plain reading in the cell, the raw yes-rate only in the metric's details.
    assert cells.summary["estimate"] == f"8 % ({s.ci_low * 100:.0f}–{s.ci_high * 100:.0f} %)"
    assert "raw (perturbed) yes-rate 0.2909 of 1,100 reports" in page
    assert page.count("<svg") >= 1 and "epsilon = 1.099" in page
    assert [x for x in cells.links if not x.startswith("#")] == []  # only in-page references
    assert not re.search(r"""(src|href)\s*=\s*["']?https?://""", page)
    assert not re.search(r"url\(\s*['\"]?https?://", page)
