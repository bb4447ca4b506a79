"""The live dashboard in a real headless Chromium, against a real collector and real Redis.

Reports are posted over HTTP on three simulated days (the collector's demo-only clock files
them under past days); the page's numbers, read from the DOM after its script ran, must equal
what the analysis package computes from the same counts. A screenshot goes to artifacts/.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest
import requests

from deniable.analysis import HTTPSource, series
from deniable.analysis.timeseries import floor
from deniable.client import Reporter
from deniable.collector.auth import create_key
from deniable.collector.server import CollectorProcess

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is not installed: run ./dev test as root (it installs Debian's "
                    "chromium) or apt-get install chromium")
    return exe


def browse(url: str, *extra: str) -> str:
    with tempfile.TemporaryDirectory(prefix="deniable-chromium-") as profile:
        done = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}",
                               "--virtual-time-budget=15000", *extra, url],
                              capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Buckets(HTMLParser):
    """metric -> [(start, {field: text})] from the dashboard's bucket tables."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self.ready = False
        self._metric = ""
        self._field: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        if tag == "section" and a.get("data-metric"):
            self._metric = a["data-metric"] or ""
            self.found[self._metric] = []
        if tag == "tr" and a.get("data-start"):
            self.found[self._metric].append((a["data-start"] or "", {}))
        if tag == "td" and a.get("data-field"):
            self._field = a["data-field"]

    def handle_data(self, data: str) -> None:
        if self._field:
            self.found[self._metric][-1][1][self._field] = data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._field = None


def test_dashboard_renders_the_analysis_numbers_in_chromium(
        redis_url: str, metrics_file: Path, redis_client, tmp_path: Path) -> None:
    clock = tmp_path / "clock"
    days = [-2, -1, 0]
    ingest = create_key(redis_client, "ingest", app="dashboard-test").secret
    read = create_key(redis_client, "read").secret
    env = {"DENIABLE_DEMO_CLOCK_FILE": str(clock), "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
           "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}  # auth stays on
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as collector:
        for i, day in enumerate(days):
            clock.write_text(str(day * 86400))
            with Reporter(collector.url, batch_size=1000, token=ingest,
                          fresh={"feature_x_enabled", "dark_mode"}) as reporter:  # many devices
                for k in range(400 * (i + 1)):
                    reporter.report("feature_x_enabled", k % (i + 2) == 0)
                    reporter.report("dark_mode", k % 3 == 0)
        now = datetime.now(timezone.utc)
        start, end = floor(now - timedelta(days=3), "day"), floor(now, "hour") + timedelta(hours=1)
        query = urlencode({"from": start.isoformat(), "to": end.isoformat(), "every": "day"})
        page = requests.get(f"{collector.url}/dashboard", timeout=5)
        assert page.status_code == 200 and "dashboard.js" in page.text
        assert not re.search(r"""(src|href)=["']https?://""", page.text)  # works offline
        data_url = f"{collector.url}/dashboard/data?metric=dark_mode"
        assert requests.get(data_url, timeout=5).status_code == 401  # the data wants a read token
        assert requests.get(data_url, timeout=5,
                            headers={"Authorization": f"Bearer {ingest}"}).status_code == 403
        bad = requests.get(f"{collector.url}/dashboard/data?metric=nope", timeout=5,
                           headers={"Authorization": f"Bearer {read}"})
        assert bad.status_code == 404
        assert bad.headers["Content-Type"] == "application/problem+json"

        dom = Buckets()
        dom.feed(browse(f"{collector.url}/dashboard?{query}#token={read}", "--dump-dom"))
        assert dom.ready, "the dashboard script did not finish"
        source = HTTPSource(collector.url, token=read)
        for metric in ("feature_x_enabled", "dark_mode"):
            expected = series(source.counts(metric, start, end), "day", start, end).estimates
            shown = dom.found[metric]
            assert [int(cells["n"]) for _, cells in shown] == expected.n.tolist()
            assert sum(int(cells["n"]) for _, cells in shown) == 2_400
            for (_, cells), n, est, low, high in zip(shown, expected.n, expected.estimate,
                                                     expected.ci_low, expected.ci_high):
                if n == 0:
                    assert cells["estimate"] == "-"
                    continue
                assert cells["estimate"] == f"{est:.4f}"
                assert (cells["ci_low"], cells["ci_high"]) == (f"{low:.4f}", f"{high:.4f}")
        assert sorted(int(c["n"]) for _, c in dom.found["dark_mode"] if c["n"] != "0") == \
            [400, 800, 1200]

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        shot.unlink(missing_ok=True)
        browse(f"{collector.url}/dashboard?{query}#token={read}", f"--screenshot={shot}",
               "--window-size=1100,1500", "--hide-scrollbars")
        assert shot.stat().st_size > 10_000
