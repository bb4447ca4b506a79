"""The dashboard's open-domain view in headless Chromium, over a real collector (``deniable
serve``, gunicorn) and a real Redis: the strings the page lists, over the range and on a day it
opens, are those ``discover`` finds in the stored counters, and a string sent by devices is
drawn as text, never as markup (it is attacker-controllable).

Deterministic: the devices' answers are the real client's perturbation with seeded coins
(``_counters`` and ``perturb_padded`` with ``_Seeded``), and the page is compared with the
decoder on the very counters in Redis, so no false-failure rate applies.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pytest
import redis
import requests

from deniable.analysis.discovery import discover
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.open_domain import normalise
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from deniable.core import keys
from tests.analysis.test_discovery import _counters, _Seeded
from tests.conftest import OPEN_ENV
from tests.e2e.test_dashboard import ARTIFACTS, devtools

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

METRICS = """\
[metrics.crash_sig]
kind = "open"
epsilon = 4.0
max_bytes = 4
period = "day"

[metrics.weekly_sig]
kind = "open"
epsilon = 4.0
max_bytes = 4
period = "week"

[metrics.hourly_sig]
kind = "open"
epsilon = 4.0
max_bytes = 4
period = "hour"
"""
EARLIER = {"oom": 1200, "gc": 700, **{f"t{i:03d}": 2 for i in range(600)}}  # two days ago
TODAY = {"oom": 800, "<b>": 900, "<i>": 600, **{f"u{i:03d}": 2 for i in range(400)}}


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    path = tmp_path_factory.mktemp("dashboard-open") / "metrics.toml"
    path.write_text(METRICS)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        with CollectorProcess(redis_url, path, workers=2, env=OPEN_ENV) as process:
            yield process
    finally:  # the session's redis-server is shared: leave nothing behind
        client.flushdb()
        client.close()


def _rows(browser, selector: str) -> list[list[str]]:  # type: ignore[no-untyped-def]
    return browser.evaluate(  # type: ignore[no-any-return]
        f"Array.from(document.querySelectorAll('{selector} tbody tr[data-string]'))"
        ".map(tr => [tr.dataset.string, tr.querySelector('[data-field=share]').textContent,"
        " tr.querySelector('[data-field=lower]').textContent])")


def _shot(browser: Any, name: str) -> Path:
    """A full-page screenshot at 1,100 px wide, to artifacts/ (looked at by a person)."""
    return browser.screenshot(ARTIFACTS / name, 8000)  # type: ignore[no-any-return]


def _overlapping_ticks(browser: Any, chart: str) -> list[list[str]]:
    """Pairs of x-tick labels of ``chart`` (a selector) whose boxes overlap."""
    return browser.evaluate(  # type: ignore[no-any-return]
        f"(() => {{ const t = Array.from(document.querySelectorAll('{chart} .x-tick'))"
        ".map(e => [e.textContent, e.getBoundingClientRect()]); const out = [];"
        "for (let i = 1; i < t.length; i++) if (t[i][1].left < t[i - 1][1].right)"
        " out.push([t[i - 1][0], t[i][0]]); return out; })()")


def _start(browser: Any, url: str) -> None:
    browser.open(url, "document.body && document.body.dataset.ready === '1'")
    assert browser.evaluate("document.querySelectorAll('.error').length") == 0


def _trend(browser: Any, value: str) -> dict[str, Any]:
    """Click "over time" on ``value``'s row of the range's table; what the chart shows."""
    browser.evaluate("Array.from(document.querySelectorAll('table[data-period=window] "
                     f"tr[data-string]')).find(tr => tr.dataset.string === {value!r})"
                     ".querySelector('button.trend-button').click()")
    browser.wait_for("document.querySelector('div.trend') && "
                     "document.querySelector('div.trend').dataset.ready === '1'")
    return browser.evaluate(  # type: ignore[no-any-return]
        "(() => { const svg = document.querySelector('div.trend svg.trend'); return {"
        "error: document.querySelectorAll('div.trend .error').length,"
        "heading: document.querySelector('div.trend h3').textContent,"
        "legend: svg.querySelector('text.legend').textContent,"
        "label: svg.getAttribute('aria-label'),"
        "titles: Array.from(svg.querySelectorAll('circle title')).map(t => t.textContent),"
        "points: svg.querySelectorAll('circle.point').length,"
        "xticks: Array.from(svg.querySelectorAll('.x-tick')).map(t => t.textContent),"
        "yticks: Array.from(svg.querySelectorAll('.y-tick')).map(t => t.textContent),"
        "ytitle: svg.querySelector('.y-title').textContent,"
        "xtitle: svg.querySelector('.x-title').textContent}; })()")


def _expected(sketch, counters: np.ndarray) -> list[list[str]]:  # type: ignore[no-untyped-def]
    found = discover(sketch, counters, confidence=0.95).found
    return [[f.string, f"{f.share:.4f}", f"{f.lower:.4f}"] for f in found]


def test_the_page_lists_the_discovered_strings_as_text(collector: CollectorProcess,
                                                      redis_url: str) -> None:
    entry = next(e for e in requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
                 ["metrics"] if e["name"] == "crash_sig")
    spec = MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"]))
    sketch = spec.mechanism
    client = redis.Redis.from_url(redis_url)
    today = keys.hour_index(datetime.now(timezone.utc)) // 24
    client.set(keys.open_counters("crash_sig", sketch.id, (today - 2) * 24),
               _counters(sketch, EARLIER, seed=2).astype(keys.COUNTER_DTYPE).tobytes())  # type: ignore[arg-type]
    rng = _Seeded(7)  # today's reports go through the collector's ingest
    reports = [("crash_sig", sketch.id, sketch.perturb_padded(normalise(value, 4), rng))  # type: ignore[union-attr]
               for value, devices in TODAY.items() for _ in range(devices)]
    for first in range(0, len(reports), 1000):
        answer = requests.post(f"{collector.url}/v1/reports", timeout=30,
                               json=encode_batch(new_batch_id(), reports[first:first + 1000]))
        assert answer.status_code == 202, answer.text
    days = {d: np.frombuffer(client.get(keys.open_counters("crash_sig", sketch.id, d * 24)) or b"",
                             dtype=keys.COUNTER_DTYPE).astype(np.int64)
            for d in (today - 2, today)}
    client.close()
    window = _expected(sketch, days[today - 2] + days[today])
    assert {"<b>", "oom"} <= {row[0] for row in window}

    with devtools() as browser:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=f"{collector.url}/dashboard?metric=crash_sig")
        browser.wait_for("document.body && document.body.dataset.ready === '1'")
        assert browser.evaluate("document.querySelectorAll('.error').length") == 0
        assert _rows(browser, "table[data-period=window]") == window
        # Markup in a string stays text: no element came from it.
        assert browser.evaluate("document.querySelectorAll('main b, main i').length") == 0
        assert browser.evaluate(
            "document.querySelector('tr[data-string=\"<b>\"] code').textContent") == "<b>"
        # Every day of the range on the dated axis, the empty ones at 0.
        ticks = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.days .x-tick')).map(t => t.textContent)")
        day = keys.hour_start(today * 24).date().isoformat()
        bars = browser.evaluate("document.querySelectorAll('svg.days rect.bar').length")
        assert day[5:] in ticks and bars in (7, 8)  # the last 7 days, the first one partial
        # A day, decoded when opened: that day's counters alone.
        browser.evaluate(f"document.querySelector('details.day[data-day=\"{day}\"]').open = true")
        browser.wait_for(f"document.querySelector('details.day[data-day=\"{day}\"]')"
                         ".dataset.ready === '1'")
        assert _rows(browser, f"table[data-period=\"{day}\"]") == _expected(sketch, days[today])
        # "<b>" over time: a point per day with reports (an estimate near 0 on the day no
        # device sent it), its label text everywhere.
        drawn = _trend(browser, "<b>")
        assert drawn["error"] == 0 and drawn["points"] == 2
        assert drawn["legend"] == "<b>" and "<b>" in drawn["heading"] and "<b>" in drawn["label"]
        assert all(t.startswith("<b>: ") for t in drawn["titles"])
        assert browser.evaluate("document.querySelectorAll('main b, main i').length") == 0
        assert drawn["ytitle"] == "share of reports (%)"
        assert all(t.endswith(" %") for t in drawn["yticks"]) and day[5:] in drawn["xticks"]
        assert drawn["xtitle"].startswith("day (UTC) 20")
        assert _overlapping_ticks(browser, "svg.trend") == []
        drawn = _trend(browser, "oom")
        assert drawn["points"] == 2 and drawn["legend"] == "oom"
        _shot(browser, "dashboard-open-trend.png")


def test_a_string_with_a_line_separator_is_drawn_escaped(collector: CollectorProcess,
                                                         redis_url: str) -> None:
    """U+2028 (and markup) in a discovered string: shown escaped in the table, the trend's
    legend, title and tooltips; never a line break or an element."""
    entry = next(e for e in requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
                 ["metrics"] if e["name"] == "weekly_sig")
    sketch = MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"])).mechanism
    client = redis.Redis.from_url(redis_url)
    this_week = keys.period_hour(keys.hour_index(datetime.now(timezone.utc)), "week")
    weeks = {1: {"oom": 1200, "x\u2028": 900, **{f"t{i:03d}": 2 for i in range(600)}},
             2: {"oom": 700, "x\u2028": 1100, **{f"t{i:03d}": 2 for i in range(600)}},
             4: {"oom": 900, "<i>": 900, **{f"t{i:03d}": 2 for i in range(600)}}}
    for ago, population in weeks.items():
        client.set(keys.open_counters("weekly_sig", sketch.id, this_week - 168 * ago, "week"),
                   _counters(sketch, population, seed=ago).astype(keys.COUNTER_DTYPE)  # type: ignore[arg-type]
                   .tobytes())
    client.close()
    now = datetime.now(timezone.utc)
    query = urlencode({"metric": "weekly_sig", "from": (now - timedelta(weeks=6)).isoformat(),
                       "to": now.isoformat()})
    with devtools() as browser:
        _start(browser, f"{collector.url}/dashboard?{query}")
        rows = _rows(browser, "table[data-period=window]")
        assert "x\u2028" in [r[0] for r in rows]
        shown = browser.evaluate(
            "document.querySelector('tr[data-string=\"x\\u2028\"] code').textContent")
        assert shown == "x\\u2028"  # escaped, not a line separator
        # Weeks drawn as weeks: one bar a week wide, labelled by their Monday.
        bars = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.days rect.bar')).map(r => "
            "[r.dataset.day, +r.getAttribute('width')])")
        ticks = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.days .x-tick')).map(t => t.textContent)")
        assert len(bars) in (7, 8) and all(t.startswith("week of 20") for t in ticks)
        assert all(datetime.fromisoformat(b[0]).weekday() == 0 for b in bars)
        assert min(b[1] for b in bars) > 0.75 * (900 - 66 - 12) / len(bars)
        assert _overlapping_ticks(browser, "svg.days") == []
        days = [d[0] for d in bars]
        assert browser.evaluate("document.querySelector('svg.days .x-title').textContent"
                                ).startswith("week (UTC)")
        drawn = _trend(browser, "x\u2028")
        assert drawn["legend"] == "x\\u2028" and "x\\u2028" in drawn["heading"]
        assert all(t.startswith("x\\u2028: week of ") for t in drawn["titles"])
        assert "\u2028" not in drawn["label"] + "".join(drawn["titles"]) + drawn["legend"]
        assert drawn["points"] == 3 and all(t.startswith("week of ") for t in drawn["xticks"])
        assert _overlapping_ticks(browser, "svg.trend") == []
        assert browser.evaluate("document.querySelectorAll('main b, main i').length") == 0
        assert days
        _shot(browser, "dashboard-open-weeks.png")


def test_an_hourly_metric_is_drawn_by_the_hour(collector: CollectorProcess,
                                               redis_url: str) -> None:
    entry = next(e for e in requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
                 ["metrics"] if e["name"] == "hourly_sig")
    sketch = MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"])).mechanism
    client = redis.Redis.from_url(redis_url)
    hour = keys.hour_index(datetime.now(timezone.utc))
    for ago in (2, 3, 5):
        client.set(keys.open_counters("hourly_sig", sketch.id, hour - ago, "hour"),
                   _counters(sketch, {"oom": 1500, "gc": 900, **{f"t{i:03d}": 2  # type: ignore[arg-type]
                                                                   for i in range(300)}},
                             seed=ago).astype(keys.COUNTER_DTYPE).tobytes())
    client.close()
    now = keys.hour_start(hour)
    query = urlencode({"metric": "hourly_sig", "from": (now - timedelta(hours=12)).isoformat(),
                       "to": now.isoformat()})
    with devtools() as browser:
        _start(browser, f"{collector.url}/dashboard?{query}")
        bars = browser.evaluate("document.querySelectorAll('svg.days rect.bar').length")
        ticks = browser.evaluate(
            "Array.from(document.querySelectorAll('svg.days .x-tick')).map(t => t.textContent)")
        assert bars == 12 and ticks and all(re.fullmatch(r"\d\d-\d\d \d\dh", t) for t in ticks)
        assert _overlapping_ticks(browser, "svg.days") == []
        folds = browser.evaluate(
            "Array.from(document.querySelectorAll('details.day summary')).map(s => s.textContent)")
        assert [f.split(":")[0] for f in folds] == [
            f"{keys.hour_start(hour - ago):%Y-%m-%d %H}" for ago in (2, 3, 5)]
        drawn = _trend(browser, "oom")
        assert drawn["points"] == 3 and drawn["xtitle"].startswith("hour (UTC)")
        _shot(browser, "dashboard-open-hours.png")


def test_an_open_metric_has_a_version_picker(collector: CollectorProcess,
                                             redis_url: str) -> None:
    """A second version (epsilon 2): the picker lists both; picking 1 shows version 1's own
    strings (this test runs last: it changes crash_sig's current version)."""
    old = next(e for e in requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
               ["metrics"] if e["name"] == "crash_sig")
    old_sketch = MetricSpec.from_document(old, parse_mechanism(old["mechanism"])).mechanism
    published = requests.post(f"{collector.url}/v1/admin/metrics", timeout=10, json={
        "name": "crash_sig", "kind": "open", "epsilon": 2.0, "max_bytes": 4, "period": "day"})
    assert published.status_code == 201, published.text
    client = redis.Redis.from_url(redis_url)
    today = keys.hour_index(datetime.now(timezone.utc)) // 24
    days = {d: np.frombuffer(client.get(keys.open_counters("crash_sig", old_sketch.id, d * 24))
                             or b"", dtype=keys.COUNTER_DTYPE).astype(np.int64)
            for d in (today - 2, today)}
    client.close()
    time.sleep(2.5)  # the workers' registry cache (REGISTRY_CACHE_SECONDS, 2 s)
    with devtools() as browser:
        _start(browser, f"{collector.url}/dashboard?metric=crash_sig")
        options = browser.evaluate("Array.from(document.querySelectorAll("
                                   "'select.version-picker option')).map(o => o.textContent)")
        assert len(options) == 3 and options[0] == "latest (2)", options
        assert browser.evaluate("document.querySelectorAll('table[data-period=window] "
                                "tr[data-string]').length") == 0  # version 2 has no reports
        browser.evaluate("const p = document.querySelector('select.version-picker');"
                         "p.value = '1'; p.dispatchEvent(new Event('change'))")
        time.sleep(0.5)
        browser.wait_for("document.body && document.body.dataset.ready === '1' && "
                         "location.search.includes('v.crash_sig=1')")
        assert browser.evaluate("document.querySelector('p.policy').textContent"
                                ).startswith("Version 1.")
        assert _rows(browser, "table[data-period=window]") == _expected(
            old_sketch, days[today - 2] + days[today])
        _shot(browser, "dashboard-open-versions.png")
