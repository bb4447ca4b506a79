"""The live dashboard's "by" choice in headless Chromium: the breakdown table the page draws
(read from the DOM after its script ran) has the analysis' cells, n and estimates, and a
suppressed cell shows its reason and no estimate."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis

from deniable.analysis import HTTPSource
from deniable.analysis.breakdown import breakdown
from deniable.collector.server import CollectorProcess
from tests.analysis.test_breakdown import RANGE
from tests.analysis.test_breakdown_http import METRICS, RR, _post
from tests.conftest import OPEN_ENV
from tests.e2e.test_dashboard import browse

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane


class Breakdown(HTMLParser):
    """The by-table rows (``tr[data-label]``) as {field: text}, and the "by" options."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.options: list[str] = []
        self.ready = False
        self.notes: list[str] = []
        self._row: dict[str, str] | None = None
        self._field: str | None = None
        self._in_by = self._in_note = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        self._in_by = self._in_by or (tag == "select" and a.get("name") == "by")
        if tag == "option" and self._in_by:
            self.options.append(a.get("value") or "")
        if tag == "tr":  # a breakdown row, or another table's (not read)
            self._row = self.rows.setdefault(a["data-label"] or "", {
                "suppressed": a.get("data-suppressed") or ""}) if a.get("data-label") else None
        if tag == "td" and a.get("data-field") and self._row is not None:
            self._field = a["data-field"]
        self._in_note = tag == "p" and "suppression" in (a.get("class") or "")

    def handle_data(self, data: str) -> None:
        if self._field and self._row is not None:
            self._row[self._field] = data
        if self._in_note:
            self.notes.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._field = None
        if tag == "select":
            self._in_by = False
        if tag == "p":
            self._in_note = False


def test_the_dashboard_draws_a_breakdown_with_its_suppressed_cell(redis_url: str,  # type: ignore[no-untyped-def]
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(METRICS)
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as collector:
        _post(collector.url,
              [("adopt_http", RR, 1, {"app_version": "2.3"})] * 130
              + [("adopt_http", RR, 0, {"app_version": "2.4"})] * 40)
        query = urlencode({"from": RANGE[0].isoformat(), "to": RANGE[1].isoformat(),
                           "by": "app_version", "metric": "adopt_http"})
        dom = Breakdown()
        dom.feed(browse(f"{collector.url}/dashboard?{query}", "--dump-dom"))
        assert dom.ready, "the dashboard script did not finish"
        assert {"", "app_version", "platform", "app_version,platform"} <= set(dom.options)
        want = breakdown(HTTPSource(collector.url), "adopt_http", "app_version", *RANGE)
        for cell in want.cells:
            row = dom.rows[cell.label]
            assert row["n"] == str(cell.n)
            assert row["suppressed"] == ("1" if cell.suppressed else "0")
            if cell.suppressed:
                assert row["estimate"] == "-" and row["flags"] == f"SUPPRESSED: {cell.reason}"
            else:
                assert cell.summary is not None
                assert row["estimate"] == f"{cell.summary.estimate:.4f}"
        assert dom.rows["not stated"]["n"] == str(want.not_stated)
        assert any("single people out" in note for note in dom.notes)
    redis.Redis.from_url(redis_url).flushdb()  # leave no metrics behind for other modules
