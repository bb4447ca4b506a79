"""A metric's history across versions, end to end: an admin publishes version 1, 2,000
simulated devices report it on two days (true share 30 %), the admin publishes version 2 (a
new mechanism), and the same devices report it on the next two days (true share 50 %). Through
the real client, collector (with its demo clock) and Redis, one series spans both versions,
each part debiased with its own mechanism and within its interval of the truth, with the
version change marked: in the analysis, the CLI, the HTML report and the dashboard's data.

False-failure rate: each of the 4 day buckets is checked against an interval at confidence
1 - 1e-7 (5.33 standard errors); the intervals are honest (docs/analysis.md, coverage), so
each misses with probability about 1e-7: at most 4e-7 in all.
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import requests

from deniable.analysis import HTTPSource
from deniable.analysis.history import history
from deniable.analysis.timeseries import floor
from deniable.cli.demo import _population_reporter
from deniable.client import Delivery, Storage
from deniable.collector.server import CollectorProcess
from tests.analysis.test_charts_browser import _look
from tests.conftest import OPEN_ENV
from tests.e2e.test_dashboard import devtools

METRIC = "editor_history"
DEVICES = 2_000
TRUTH = {1: 0.30, 2: 0.50}
MECHANISMS = {1: "rr:1/2:1/2", 2: "rr:3/4:1/2"}
DAY = 86_400


def _report(url: str, clock: Path, days: tuple[int, ...], share: float, tmp: Path,
            mechanism: str) -> None:
    # The app of each release declares the mechanism that release reports under.
    reporter = _population_reporter(DEVICES, url, delivery=Delivery(batch_size=500),
                                    storage=Storage(privacy_dir=tmp), metrics={METRIC: mechanism})
    try:
        assert reporter.wait_ready(30)  # type: ignore[attr-defined]
        for day in days:
            clock.write_text(str(-(3 - day) * DAY))  # day 0 is three days ago
            for device in range(DEVICES):
                reporter.device = device  # type: ignore[attr-defined]
                reporter.report(METRIC, device < share * DEVICES)  # type: ignore[attr-defined]
            assert reporter.flush(timeout=60)  # type: ignore[attr-defined]
    finally:
        reporter.close(timeout=10)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_one_series_spans_both_versions_each_part_within_its_interval(
        redis_url: str, redis_client, metrics_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clock = tmp_path / "clock"
    clock.write_text("0")
    env = {**OPEN_ENV, "DENIABLE_DEMO_CLOCK_FILE": str(clock),
           "DENIABLE_REGISTRY_CACHE_SECONDS": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as collector:
        url = collector.url
        for version, days in ((1, (0, 1)), (2, (2, 3))):
            published = requests.post(f"{url}/v1/admin/metrics", timeout=10,
                                      json={"name": METRIC, "mechanism": MECHANISMS[version]})
            assert published.status_code == 201, published.text
            _report(url, clock, days, TRUTH[version], tmp_path / f"v{version}",
                    MECHANISMS[version])
        clock.write_text("0")
        now = datetime.now(timezone.utc)
        start, end = floor(now - timedelta(days=3), "day"), now + timedelta(hours=1)
        h = history(HTTPSource(url), METRIC, start, end, "day", confidence=1 - 1e-7)
        assert h is not None and h.versions == [1, 2]
        busy = [i for i in range(len(h.starts)) if h.n[i]]
        assert len(busy) == 4 and [int(h.version[i]) for i in busy] == [1, 1, 2, 2]
        assert [(i, a, b) for i, a, b in h.changes] == [(busy[2], 1, 2)]
        for i, version in zip(busy, (1, 1, 2, 2)):
            assert h.n[i] == DEVICES
            assert h.ci_low[i] <= TRUTH[version] <= h.ci_high[i], (i, h.estimate[i])
        # The CLI: one table across both versions, the change marked; JSON says it too.
        window = ["--from", start.isoformat(), "--to", end.isoformat()]
        shown = subprocess.run([sys.executable, "-m", "deniable.cli", "report", "--collector",
                                url, "--metric", METRIC, "--every", "day", *window],
                               capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0, shown.stderr
        assert f"{METRIC} across versions 1, 2" in shown.stdout
        assert "-- version 2 from here (was 1) --" in shown.stdout
        doc = subprocess.run([sys.executable, "-m", "deniable.cli", "report", "--collector",
                              url, "--metric", METRIC, "--every", "day", "--format", "json",
                              *window], capture_output=True, text=True, timeout=120)
        [joined] = json.loads(doc.stdout)["history"]
        assert joined["versions"] == [1, 2] and joined["changes"][0]["to"] == 2
        page = tmp_path / "report.html"
        made = subprocess.run([sys.executable, "-m", "deniable.cli", "report", "--collector",
                               url, "--metric", METRIC, "--html", str(page), *window],
                              capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        text = page.read_text()
        assert 'class="chart history" data-versions="1,2"' in text
        assert 'class="mark-label"' in text and ">version 2<" in text
        # The dashboard's data: the older version's part, debiased with its own mechanism.
        data = requests.get(f"{url}/dashboard/data", timeout=10, params={
            "metric": METRIC, "from": start.isoformat(), "to": end.isoformat()}).json()
        assert [v["version"] for v in data["versions"]] == [1, 2]
        [older] = data["history"]
        assert older["version"] == 1 and older["mechanism"] == MECHANISMS[1]
        assert sum(b["n"] for b in older["buckets"]) == 2 * DEVICES
        alone = requests.get(f"{url}/dashboard/data", timeout=10, params={
            "metric": METRIC, "from": start.isoformat(), "to": end.isoformat(),
            "version": "1"}).json()  # the version picker: version 1 on its own
        assert alone["version"] == 1 and alone["mechanism"] == MECHANISMS[1]
        assert alone["summary"]["n"] == 2 * DEVICES and "history" not in alone
        missing = requests.get(f"{url}/dashboard/data", timeout=10,
                               params={"metric": METRIC, "version": "9"})
        assert missing.status_code == 404 and "[1, 2]" in missing.text
        # ... drawn in the browser: the older part beside the current one, the change marked.
        query = f"from={start.isoformat()}&to={end.isoformat()}&metric={METRIC}".replace(
            "+", "%2B")
        with devtools() as browser:
            charts = _look(browser, f"{url}/dashboard?{query}", tmp_path / "history.png", "0")
            drawn = browser.evaluate(
                "({picker: document.querySelectorAll('select.version-picker option').length, "
                "older: document.querySelectorAll('polyline.history').length, "
                "marks: Array.from(document.querySelectorAll('.mark-label'))"
                ".map(t => t.textContent)})")
        assert charts and all(c["ytitle"] for c in charts)
        assert drawn["older"] == 1 and "version 2 from here" in drawn["marks"], drawn
        assert drawn["picker"] == 3  # "all, joined", 1 and 2
