"""The live dashboard in a real headless Chromium, against a real collector and real Redis.

Reports are posted over HTTP on three simulated days (the collector's demo-only clock files
them under past days); the page's numbers, read from the DOM after its script ran, must equal
what the analysis package computes from the same counts. A screenshot goes to artifacts/.
"""
from __future__ import annotations

import json
import base64
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import requests

from deniable.analysis import HTTPSource, series
from deniable.analysis.timeseries import floor
from deniable.client import Delivery, Privacy, Reporter
from deniable.collector.auth import create_key
from deniable.collector.server import CollectorProcess

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

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


class DevTools:
    """A headless Chromium driven over the DevTools protocol on a pipe (no extra package):
    ``--remote-debugging-pipe`` reads commands on fd 3 and writes answers on fd 4, each a JSON
    object ended by a NUL byte."""

    def __init__(self, commands: int, answers: int) -> None:
        self._commands, self._answers = commands, answers
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            for answer in self._read(deadline):
                if answer.get("id") == self._next_id:
                    assert "error" not in answer, (method, answer["error"])
                    return answer.get("result", {})
                self.events.append(answer)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def open(self, url: str, ready: str, width: int = 1100) -> None:
        """Load ``url`` in a ``width`` x 900 px viewport and wait until ``ready`` (an
        expression) holds."""
        for domain in ("Page", "Runtime"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=900,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        self.wait_for(ready)

    def screenshot(self, path: Path, max_height: int, width: int = 1100) -> Path:
        """A full-page screenshot (at most ``max_height`` px) written to ``path``, for a person
        to look at; a page that drew nothing fails."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.call("Emulation.setDeviceMetricsOverride", width=width,
                  height=min(height, max_height), deviceScaleFactor=1, mobile=False)
        time.sleep(0.3)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot",
                                                    format="png")["data"]))
        assert path.stat().st_size > 20_000
        return path

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"{expression} never held")

    def _read(self, deadline: float) -> list[dict[str, Any]]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "Chromium did not answer in time"
            if select.select([self._answers], [], [], left)[0]:
                chunk = os.read(self._answers, 1 << 16)
                assert chunk, "Chromium closed its DevTools pipe"
                self._buffer += chunk
        *whole, self._buffer = self._buffer.split(b"\0")
        return [json.loads(m) for m in whole if m]


PIPES_ON_3_AND_4 = """
import fcntl, os, sys
# Both above 9 first (not CLOEXEC), so that neither is already 3 or 4, nor clobbered.
read_end, write_end = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])
os.dup2(read_end, 3)
os.dup2(write_end, 4)
os.execv(sys.argv[3], sys.argv[3:])
"""
"""Execs Chromium with the given pipe ends on fds 3 and 4 (its DevTools pipe)."""


@contextmanager
def devtools() -> Iterator[DevTools]:
    """A headless Chromium with one blank page attached (``DevTools.session``)."""
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    with tempfile.TemporaryDirectory(prefix="deniable-chromium-") as profile:
        process = subprocess.Popen(
            [sys.executable, "-c", PIPES_ON_3_AND_4, str(to_chrome_r), str(from_chrome_w),
             chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"],
            pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        try:
            tools = DevTools(to_chrome_w, from_chrome_r)
            target = tools.call("Target.createTarget", url="about:blank")["targetId"]
            tools.session = tools.call("Target.attachToTarget", targetId=target,
                                       flatten=True)["sessionId"]
            yield tools
        finally:
            os.close(to_chrome_w)
            os.close(from_chrome_r)
            os.killpg(process.pid, signal.SIGKILL)  # the browser and its renderers
            process.wait(timeout=30)


VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", e => window.__violations.push(
    {directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample}));
"""
"""Runs before the page's own scripts (DevTools scripts are not subject to its policy)."""


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
            with Reporter(collector.url, metrics_file, delivery=Delivery(batch_size=1000),
                          privacy=Privacy(one_per_period=False,
                                          fresh={"feature_x_enabled", "dark_mode"}),
                          token=ingest) as reporter:  # many devices
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


@pytest.mark.slow
def test_the_dashboard_keeps_its_policy_and_drops_the_key_from_the_url(
        redis_url: str, metrics_file: Path, redis_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """In Chromium: the page draws both metrics under its Content-Security-Policy with no
    violation, the read key leaves the address bar at once (and the history entry), a reload
    still works from the tab's session, and the policy does block inline script."""
    read = create_key(redis_client, "read").secret
    env = {"DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=1, env=env) as collector, \
            devtools() as browser:
        for domain in ("Page", "Runtime", "Log"):
            browser.call(f"{domain}.enable")
        browser.call("Page.addScriptToEvaluateOnNewDocument", source=VIOLATIONS)
        browser.call("Page.navigate", url=f"{collector.url}/dashboard?every=hour#token={read}")
        browser.wait_for("document.body && document.body.dataset.ready === '1'")
        assert browser.evaluate("location.href") == f"{collector.url}/dashboard?every=hour"
        assert read not in browser.evaluate("JSON.stringify(history.state) + location.hash")
        assert browser.evaluate("document.querySelectorAll('section[data-metric]').length") == 2
        assert browser.evaluate("document.querySelectorAll('.error').length") == 0
        assert browser.evaluate("window.__violations") == []

        browser.call("Page.reload")
        browser.wait_for("document.body && document.body.dataset.ready === '1'")
        assert browser.evaluate("document.querySelectorAll('section[data-metric] svg').length") == 2
        assert read not in browser.evaluate("location.href")

        # The detector works, and the policy holds: an injected inline script is refused.
        browser.evaluate("const s = document.createElement('script'); s.textContent = "
                         "'window.__ran = 1'; document.body.appendChild(s); 0")
        browser.wait_for("window.__violations.length")
        assert browser.evaluate("window.__ran") is None
        assert browser.evaluate("window.__violations[0].directive").startswith("script-src")
        logged = [e["params"]["entry"] for e in browser.events if e.get("method") ==
                  "Log.entryAdded" and e["params"]["entry"]["level"] == "error"]
        refused = [e for e in logged if "Content Security Policy" in e.get("text", "")]
        assert len(refused) == 1 and "inline" in refused[0]["text"], logged
        assert all(e.get("url", "").endswith("/favicon.ico") for e in logged
                   if e not in refused), logged  # nothing else went wrong

        # A new tab has no key: the page asks for one, then draws with it.
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        browser.session = browser.call("Target.attachToTarget", targetId=target,
                                       flatten=True)["sessionId"]
        browser.call("Page.navigate", url=f"{collector.url}/dashboard")
        browser.wait_for("document.body && document.body.dataset.ready === '1'")
        assert browser.evaluate("document.getElementById('key').hidden") is False
        assert "needs an API key" in browser.evaluate(
            "document.querySelector('.error').textContent")
        browser.evaluate(f"document.querySelector('#key input').value = {json.dumps(read)}; "
                         "document.querySelector('#key button').click(); 0")
        browser.wait_for("document.querySelectorAll('section[data-metric] svg').length === 2")
        assert browser.evaluate("document.getElementById('key').hidden") is True
