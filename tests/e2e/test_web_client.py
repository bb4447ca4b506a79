"""The web client (web/, TypeScript) end to end, against a real gunicorn collector on loopback.

- In headless Chromium (Debian's chromium, driven by playwright-core): a page served on
  loopback reports through the web client across the origin boundary (CORS allows that
  origin). Its first load uses a refused key: the reports stay queued in IndexedDB through a
  reload; the second load uses a valid key. Every report arrives exactly once, and the
  memoized answers survive the reload (same device secret).
- In Node: the file queue and the file secret. The secret file is the Python client's: the
  counts at the collector are exactly what deniable.client.memo computes from it.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/): node, the built
web/dist, and chromium.
"""
from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit
from deniable.client.state import StateDir
from deniable.collector import auth
from deniable.collector.embedded import free_port
from deniable.collector.server import CollectorProcess

pytestmark = pytest.mark.slow

WEB = Path(__file__).resolve().parents[2] / "web"
X, DARK = "feature_x_enabled", "dark_mode"


def node() -> str:
    exe = shutil.which("node")
    if exe is None:
        pytest.fail("node is not installed: run ./dev test (the web client needs Node.js 20+)")
    if not (WEB / "dist" / "index.js").exists() or not (WEB / "node_modules").exists():
        pytest.fail("the web client is not built: run ./dev test (npm ci and a build in web/)")
    return exe


DECLARATION_FIELDS = ("kind", "mechanism", "edges", "lower", "upper", "clamp", "memoization",
                      "period", "dimensions", "combinations")
"""The metrics-file fields a web declaration carries (``categories`` too, for categorical)."""


def web_declarations(doc: dict[str, Any], names: Iterable[str] | None = None
                     ) -> dict[str, dict[str, Any]]:
    """The web client's ``metrics`` option for the metrics a catalogue serves now (all, or
    ``names``): each entry's metrics-file fields, as an app ships them (the mechanism the
    collector chose for ``epsilon``). The web tests declare what their collector registered."""
    wanted = None if names is None else set(names)
    found: dict[str, dict[str, Any]] = {}
    for entry in doc["metrics"]:
        if wanted is not None and entry["name"] not in wanted:
            continue
        table = {field: entry[field] for field in DECLARATION_FIELDS if field in entry}
        if entry.get("kind") == "categorical":
            table["categories"] = entry["categories"]
        found[entry["name"]] = table
    return found


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def page_server() -> Iterator[str]:
    """A static file server for web/ (the page and the built client) on a free port."""
    server = ThreadingHTTPServer(("127.0.0.1", free_port()),
                                 functools.partial(_Quiet, directory=str(WEB)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def web_collector(redis_url: str, metrics_file: Path, page_server: str
                  ) -> Iterator[CollectorProcess]:
    """A collector with auth on that lets the page's origin (only) call it."""
    env = {"DENIABLE_CORS_ORIGINS": json.dumps([page_server]), "DENIABLE_AUTH_CACHE_SECONDS": "0",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with CollectorProcess(redis_url, metrics_file, workers=2, env=env) as collector:
        yield collector


def totals(collector: CollectorProcess, read: auth.NewKey, metric: str) -> tuple[int, int]:
    response = requests.get(f"{collector.url}/v1/metrics/{metric}/counts", timeout=5,
                            headers={"Authorization": f"Bearer {read.secret}"})
    response.raise_for_status()
    buckets = response.json()["buckets"]
    return sum(b["n"] for b in buckets), sum(b["ones"] for b in buckets)


def test_a_page_reports_through_a_reload_exactly_once(page_server, web_collector,
                                                      redis_client) -> None:
    good = auth.create_key(redis_client, "ingest", "web")
    read = auth.create_key(redis_client, "read", "analysts")
    url = (f"{page_server}/e2e/index.html?phase=1&collector={web_collector.url}"
           f"&good={good.secret}&bad=dnk_revoked_key")
    done = subprocess.run([node(), "scripts/browse.mjs", url, "60000"], cwd=WEB,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["title"].startswith("done "), result
    assert "phase=2" in result["url"]  # the page did reload mid-queue
    page = json.loads(result["title"][len("done "):])
    assert page["ready"] is True and page["flushed"] is True, page
    assert page["threw"] == "UnknownMetricError"
    assert page["stats"]["keyRefused"] is False and page["stats"]["queued"] == 0
    # 150 + 100 reports per metric: the 150 queued across the reload counted once, not lost.
    x_n, x_ones = totals(web_collector, read, X)
    dark_n, dark_ones = totals(web_collector, read, DARK)
    assert (x_n, dark_n) == (250, 250)
    # Memoized answers, one per (metric, value), from one device secret across the reload:
    # x was true 50 + 100 times and false 100 times; dark true 75 times, false 75 + 100.
    assert x_ones in {150 * b1 + 100 * b0 for b0 in (0, 1) for b1 in (0, 1)}
    assert dark_ones in {75 * b1 + 175 * b0 for b0 in (0, 1) for b1 in (0, 1)}


def test_node_reports_with_its_file_queue_and_the_python_clients_secret(
        web_collector, redis_client, tmp_path) -> None:
    good = auth.create_key(redis_client, "ingest", "node-service")
    read = auth.create_key(redis_client, "read", "analysts")
    secret = StateDir(tmp_path / "privacy").secret()  # made by the Python client

    def run(token: str, n: int, close_ms: int) -> dict:
        done = subprocess.run([node(), "scripts/node-reporter.mjs", web_collector.url, token,
                               str(tmp_path), str(n), str(close_ms)], cwd=WEB,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    # Kept in queue.json, not dead-lettered; the retry that close() abandons at its deadline
    # must not clear the refusal an earlier answer gave.
    refused = run("dnk_revoked_key", 60, 800)
    assert refused["sent"] is False and refused["stats"]["keyRefused"] is True, refused
    assert refused["stats"]["queued"] == 120 and refused["stats"]["deadLettered"] == 0
    assert (tmp_path / "queue.json").stat().st_mode & 0o777 == 0o600
    sent = run(good.secret, 40, 10_000)
    assert sent["sent"] is True and sent["stats"]["queued"] == 0, sent
    # Every report of a value is the device's memoized answer, as Python derives it.
    x_bit = memo_bit(secret, X, RandomizedResponse.from_id("rr:1/2:1/2"), 1)
    dark_bit = memo_bit(secret, DARK, RandomizedResponse.from_id("rr:3/4:1/2"), 0)
    assert totals(web_collector, read, X) == (100, 100 * x_bit)
    assert totals(web_collector, read, DARK) == (100, 100 * dark_bit)


def test_leaving_the_page_sends_its_sealed_batches(page_server, web_collector,
                                                  redis_client) -> None:
    good = auth.create_key(redis_client, "ingest", "web")
    read = auth.create_key(redis_client, "read", "analysts")
    url = f"{page_server}/e2e/index.html?phase=hide&collector={web_collector.url}&good={good.secret}"
    done = subprocess.run([node(), "scripts/hide.mjs", url, "20000"], cwd=WEB,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    # Before leaving, the batch was sealed and held back (upload jitter of up to 10 minutes).
    assert json.loads(done.stdout)["before"] == 'done {"queued":20,"sent":0}'
    deadline = time.monotonic() + 10
    while totals(web_collector, read, DARK)[0] < 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert totals(web_collector, read, DARK)[0] == 20  # sent with fetch(keepalive) on the way out


@pytest.mark.parametrize("held", [False, True], ids=["readme", "held-back"])
def test_following_a_link_a_second_after_a_report_sends_it(page_server, web_collector,
                                                          redis_client, held) -> None:
    """Issue 27: Chromium fires pagehide with visibilityState still "visible" when the visitor
    follows a link; the README's embed must deliver its report on the way out. Held back (a
    sealed batch the upload loop would send 10 minutes later), only pagehide can send it."""
    good = auth.create_key(redis_client, "ingest", "web")
    read = auth.create_key(redis_client, "read", "analysts")
    before = totals(web_collector, read, DARK)[0]
    url = (f"{page_server}/e2e/index.html?phase=link&collector={web_collector.url}"
           f"&good={good.secret}" + ("&held=1" if held else ""))
    done = subprocess.run([node(), "scripts/browse.mjs", url, "30000"], cwd=WEB,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert "phase=landed" in result["url"] and result["title"] == 'done {"left":"visible"}', result
    deadline = time.monotonic() + 10
    while totals(web_collector, read, DARK)[0] < before + 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert totals(web_collector, read, DARK)[0] == before + 1


def test_two_tabs_share_one_period_gate_and_one_ledger(page_server, web_collector,
                                                        redis_client) -> None:
    """Issue 27: two tabs of one origin (one IndexedDB) report a daily metric three times each,
    at once: the collector counts one report; then an ungated metric once each: two reports of
    one answer, paid for once in the shared ledger."""
    good = auth.create_key(redis_client, "ingest", "web")
    read = auth.create_key(redis_client, "read", "analysts")
    before = {m: totals(web_collector, read, m) for m in (X, DARK)}
    url = f"{page_server}/e2e/index.html?phase=tab&collector={web_collector.url}&good={good.secret}"
    done = subprocess.run([node(), "scripts/tabs.mjs", url, "30000"], cwd=WEB,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert all(t["flushed"] for t in result["gated"] + result["ungated"]), result
    assert sum(t["stats"]["sent"] for t in result["gated"]) >= 1
    assert sum(t["stats"]["periodSkipped"] for t in result["gated"]) == 5  # 6 calls, 1 sent
    dark_n, dark_ones = totals(web_collector, read, DARK)
    x_n, x_ones = totals(web_collector, read, X)
    assert dark_n - before[DARK][0] == 1
    assert x_n - before[X][0] == 2 and (x_ones - before[X][1]) in (0, 2)  # one answer, twice
    state = result["state"]
    assert list(state["periods"]) == ["dark_mode/day"]
    assert {m: len(e["paid"]) for m, e in state["ledger"].items()} == {DARK: 1, X: 1}
    assert state["ledger"][X]["spent"] == state["oneLn3"]  # paid once, not once per tab
    assert all(len(tag) == 32 for e in state["ledger"].values() for tag in e["paid"])
