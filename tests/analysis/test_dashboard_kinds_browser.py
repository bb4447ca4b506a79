"""The live dashboard in headless Chromium for categorical, histogram and numeric metrics: the
page's numbers, read from the DOM after its script ran, equal the analysis package's."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest

from deniable.analysis import HTTPSource, series, summarize
from deniable.analysis.timeseries import floor
from deniable.collector.server import CollectorProcess
from tests.cli.test_report_kinds import METRICS, _send
from tests.conftest import OPEN_ENV
from tests.e2e.test_dashboard import ARTIFACTS, browse

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane


class Cells(HTMLParser):
    """metric -> rows of {field: text}: category rows (data-category) and bucket rows."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[dict[str, str]]] = {}
        self.ready = False
        self._metric = ""
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        if tag == "section" and a.get("data-metric"):
            self._metric = a["data-metric"] or ""
            self.rows[self._metric] = []
        if tag == "tr" and (a.get("data-category") or a.get("data-start")):
            self.rows[self._metric].append({"key": a.get("data-category") or
                                            a.get("data-start") or ""})
        if tag == "td" and a.get("data-field"):
            self._field = a["data-field"]

    def handle_data(self, data: str) -> None:
        if self._field:
            self.rows[self._metric][-1][self._field] = data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._field = None


def test_dashboard_draws_every_kind_with_the_analysis_numbers(redis_url: str,  # type: ignore[no-untyped-def]
                                                             tmp_path: Path) -> None:
    from deniable.collector.registry import RegistryError, load_metrics_file

    path = tmp_path / "metrics.toml"
    path.write_text(METRICS)
    try:
        load_metrics_file(path)
    except (RegistryError, Exception) as exc:  # noqa: BLE001 - a collector without kinds yet
        pytest.skip(f"this collector's metrics file has no kinds yet: {exc}")
    with CollectorProcess(redis_url, path, workers=1, env=OPEN_ENV) as collector:
        _send(collector.url)
        now = datetime.now(timezone.utc)
        start, end = floor(now - timedelta(days=2), "day"), floor(now, "hour") + timedelta(hours=1)
        query = urlencode({"from": start.isoformat(), "to": end.isoformat(), "every": "day"})
        dom = Cells()
        dom.feed(browse(f"{collector.url}/dashboard?{query}", "--dump-dom"))
        assert dom.ready, "the dashboard script did not finish"
        source = HTTPSource(collector.url)
        for metric in ("os_kind", "latency_kind"):
            cats = summarize(source.counts(metric, start, end)).categories
            assert cats is not None
            shown = dom.rows[metric]
            assert [r["key"] for r in shown] == list(cats.labels)
            for row, value, low, high, sim_low, sim_high in zip(
                    shown, cats.value, cats.ci_low, cats.ci_high, cats.sim_low, cats.sim_high):
                assert row["estimate"] == f"{value:.4f}"
                assert row["ci"] == f"[{low:.4f}, {high:.4f}]"
                assert row["sim"] == f"[{sim_low:.4f}, {sim_high:.4f}]"
        expected = series(source.counts("startup_kind", start, end), "day", start, end).estimates
        shown = dom.rows["startup_kind"]
        assert [int(r["n"]) for r in shown] == expected.n.tolist()
        for row, n, est in zip(shown, expected.n, expected.estimate):
            assert row["estimate"] == ("-" if n == 0 else f"{est:.4f}")
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "dashboard-kinds.png"
        shot.unlink(missing_ok=True)
        browse(f"{collector.url}/dashboard?{query}", f"--screenshot={shot}",
               "--window-size=1100,2600", "--hide-scrollbars")
        assert shot.stat().st_size > 10_000
