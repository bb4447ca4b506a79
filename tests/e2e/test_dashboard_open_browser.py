"""The dashboard's open-domain view in headless Chromium, over a real collector (``deniable
serve``, gunicorn) and a real Redis: the strings the page lists, over the range and on a day it
opens, are those ``discover`` finds in the stored counters, and a string sent by devices is
drawn as text, never as markup (it is attacker-controllable).

Deterministic: the devices' answers are the real client's perturbation with seeded coins
(``_counters`` and ``perturb_padded`` with ``_Seeded``), and the page is compared with the
decoder on the very counters in Redis, so no false-failure rate applies.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

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
from tests.e2e.test_dashboard import devtools

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

METRICS = """\
[metrics.crash_sig]
kind = "open"
epsilon = 4.0
max_bytes = 4
period = "day"
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
