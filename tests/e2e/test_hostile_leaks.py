"""Issue 26 items 3, 5 and 7 as attacks, end to end: a hostile operator drives a real collector
(gunicorn, real Redis, auth on) through its admin API and sees every request; real Python
Reporters and Node devices of the web client (web/scripts/node-contract-reporter.mjs) declare
their metrics (the app's declaration is the contract) and report through it.

3. **An identifying version** (``wide``, d = 64, declared by epsilon 2): the operator publishes
   the same question under OUE at epsilon 2, whose memoized answer singles out ~99.8 % of
   20,000 same-valued devices. No device, of any value, sends a report under it; what each
   device sends is the same for every value, so guessing a value from presence is right at
   the base rate only (chance level = the base rate, tolerance 0: deterministic, no false
   failure). The mechanism the declaration by epsilon chooses makes at most 1 % unique.
5. **Report order in a batch** (web client, both entries): a small recording proxy in front of
   the collector keeps each batch as it arrived. Devices paid for ``paid`` and ``changing``
   on a first start; on the second, half change ``changing`` (a new, asynchronously charged
   answer). Every batch lists its reports in call order, changed or not ("b before a iff a
   changed" used to be right for 100 of 100 devices; now any rule reading the order is right
   for exactly half, chance 1/2, tolerance 0: deterministic).
7. **Numeric drift past the cap** (``startup_ms`` on [0, 10000] at epsilon 1, drifting 150 ms
   a day): the operator publishes a version a day (the same question, epsilon a little under
   1) until every device's cap (ln 81) is spent, then the value keeps drifting past new grid
   points. The collector counts exactly one report per device per simulated day, none silent
   (silence says nothing: it never happens; deterministic), and each ledger charges at most
   the cap: 4 answers, as the collector counted under the 4 versions. The same on Node
   devices of deniable-client/all (the default entry has no numeric kind).

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import http.client
import json
import math
import subprocess
import threading
from collections.abc import Iterator
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import requests

from deniable.client import Privacy, Reporter, Storage
from deniable.client.budget import DEFAULT_MAX_METRIC_EPSILON
from deniable.client.categorical import (MAX_UNIQUE_SHARE, UnaryEncoding, domain_tag,
                                         unique_share)
from deniable.client.longitudinal import LongitudinalGuard
from deniable.client.numeric import BitMean
from deniable.collector import auth
from tests.client.test_sender import wait_for
from tests.e2e.test_web_client import WEB, node, web_declarations
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow

LABELS = [f"c{i}" for i in range(64)]
OUE = UnaryEncoding.from_epsilon(2.0, 64, domain_tag(LABELS))
"""The identifying version of ``wide``: the same question (its tag), epsilon 2 as declared."""
METRICS = f"""\
[metrics.wide]
kind = "categorical"
categories = {json.dumps(LABELS)}
epsilon = 2.0

[metrics.flag]
mechanism = "rr:1/2:1/2"

[metrics.paid]
mechanism = "rr:1/2:1/2"

[metrics.changing]
mechanism = "rr:1/2:1/2"

[metrics.startup_ms]
kind = "numeric"
lower = 0
upper = 10000
epsilon = 1.0
"""
RR = "rr:1/2:1/2"


@pytest.fixture()
def hostile(redis_url: str, redis_client: redis.Redis, tmp_path: Path
            ) -> Iterator[tuple[str, Path, dict[str, str], dict[str, str], str]]:
    """A collector with auth on, registry and keys re-read on every request (a published
    version shows at once): its url, the metrics file (the apps declare it too), admin and
    read headers, and an ingest key."""
    env = {"DENIABLE_AUTH_CACHE_SECONDS": "0", "DENIABLE_REGISTRY_CACHE_SECONDS": "0",
           "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0", "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0"}
    with collector_with_metrics(redis_url, METRICS, tmp_path, workers=2, env=env,
                                flush=True) as collector:
        yield (collector.url, Path(collector.metrics_file),
               {"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"},
               {"Authorization": f"Bearer {auth.create_key(redis_client, 'read').secret}"},
               auth.create_key(redis_client, "ingest", "app").secret)


def publish(url: str, admin: dict[str, str], body: dict[str, Any]) -> str:
    """Publish ``body`` through the admin API; the current mechanism id."""
    answer = requests.post(f"{url}/v1/admin/metrics", headers=admin, json=body, timeout=10)
    assert answer.status_code in (200, 201), answer.text
    return str(answer.json()["metric"]["mechanism"])


def counts(url: str, read: dict[str, str], metric: str, mechanism: str) -> tuple[int, int]:
    """(reports, ones) the collector counted for ``metric`` under ``mechanism``."""
    answer = requests.get(f"{url}/v1/metrics/{metric}/counts", headers=read, timeout=10,
                          params={"mechanism": mechanism})
    assert answer.status_code == 200, answer.text
    buckets = answer.json().get("buckets", [])
    return sum(b["n"] for b in buckets), sum(b.get("ones", 0) for b in buckets)


def node_devices(url: str, token: str, metrics: Path, devices: list[dict[str, Any]],
                 work: Path) -> list[dict[str, Any]]:
    """One app start of every device at once (web/scripts/node-contract-reporter.mjs)."""
    path = work / "devices.json"
    path.write_text(json.dumps(devices))
    done = subprocess.run([node(), "scripts/node-contract-reporter.mjs", url, token,
                           str(metrics), str(path)], cwd=WEB, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(done.stdout)
    for result in results:
        assert result["sent"] is True and result["stats"]["deadLettered"] == 0, result
    return results


def shipped(url: str, read: dict[str, str], work: Path) -> Path:
    """The app's declarations as the web client ships them (JSON), written to a file."""
    doc = requests.get(f"{url}/v1/metrics", headers=read, timeout=5).json()
    path = work / "metrics.json"
    path.write_text(json.dumps(web_declarations(doc)))
    return path


# -- item 3: a memoized answer is not a device identifier ------------------------------------

def test_an_identifying_version_gets_no_report_from_any_device_whatever_its_value(
        hostile: tuple[str, Path, dict[str, str], dict[str, str], str], tmp_path: Path) -> None:
    url, metrics, admin, read, ingest = hostile
    declared = Reporter(url, metrics, storage=Storage(privacy_dir=":memory:"))
    wide_id, flag_id = (declared.specs[m].mechanism.id for m in ("wide", "flag"))
    chosen = declared.specs["wide"].mechanism
    declared.close(timeout=0)
    # The mechanism the declaration by epsilon chooses: at most 1 % of 20,000 same-valued
    # devices unique (exact formula, checked against an enumeration in test_memo_unique).
    assert unique_share(chosen) <= MAX_UNIQUE_SHARE == 0.01  # type: ignore[arg-type]
    assert unique_share(OUE) > 0.997  # the version the operator publishes identifies
    web_metrics = shipped(url, read, tmp_path)
    assert publish(url, admin, {"name": "wide", "kind": "categorical", "categories": LABELS,
                                "mechanism": OUE.id}) == OUE.id
    # Python devices, eight different values; each also reports `flag` (so it does send).
    values = [LABELS[7 * i] for i in range(8)]
    python_sent = []
    for i, value in enumerate(values):
        state = tmp_path / f"device{i}"
        with Reporter(url, metrics, token=ingest, storage=Storage(privacy_dir=state),
                      privacy=Privacy(one_per_period=False)) as reporter:
            wait_for(lambda: reporter.catalogue_fetched and "wide" not in reporter.metrics)
            assert "single this device out" in reporter.stats().withheld_metrics["wide"]
            for _ in range(2):
                reporter.report("wide", value)  # counted, never sent: the same for every value
                reporter.report("flag", i % 2 == 0)
            assert reporter.flush(timeout=10)
            stats = reporter.stats()
            python_sent.append((stats.withheld, sorted((e.metric, e.mechanism, e.sent_n)
                                                       for e in reporter.ledger().values())))
        guard = LongitudinalGuard(state)
        try:
            spend = guard.stats()
        finally:
            guard.close()
        assert spend.get("wide") is None or spend["wide"].total_charged == 0  # nothing paid
        assert spend["flag"].total_charged == pytest.approx(math.log(3))  # what was sent
    # What the operator sees of a Python device does not depend on its value: the same for all.
    assert python_sent == [(2, [("flag", flag_id, 2)])] * len(values)
    # Node devices (deniable-client/all: the default entry has no categorical kind).
    devices = [{"dir": str(tmp_path / f"node{i}"), "entry": "all", "dimensions": {},
                "reports": [["wide", LABELS[9 * i]], ["flag", i % 2 == 0]] * 2}
               for i in range(6)]
    results = node_devices(url, ingest, web_metrics, devices, tmp_path)
    wires = []
    for result in results:
        assert result["thrown"] == 0, result
        assert "wide" not in result["metrics"], result
        wires.append(sorted((x["metric"], x["mechanism"]) for x in result["wire"]))
        assert sorted(result["ledger"]) == ["flag"], result["ledger"]  # the ledger: what was sent
        assert len(result["ledger"]["flag"]["paid"]) == 1
    assert wires == [[("flag", flag_id)] * 2] * len(devices)
    # The collector: nothing under the identifying version, nor under the declared one.
    assert counts(url, read, "wide", OUE.id)[0] == 0
    assert counts(url, read, "wide", wide_id)[0] == 0
    assert counts(url, read, "flag", flag_id)[0] == 2 * (len(values) + len(devices))


# -- item 5: report order in a batch ---------------------------------------------------------

class RecordingProxy:
    """A forwarding HTTP proxy in front of ``upstream``: every POSTed batch, as it arrived."""

    def __init__(self, upstream: str) -> None:
        self.batches: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        target = urlsplit(upstream)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "POST" and body:
                    doc = json.loads(body)
                    if isinstance(doc, dict) and "reports" in doc:
                        with proxy.lock:
                            proxy.batches.append(doc)
                connection = http.client.HTTPConnection(target.hostname or "127.0.0.1",
                                                        target.port,
                                                        timeout=30)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection")}
                connection.request(self.command, self.path, body or None, headers)
                answer = connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                connection.close()

            do_GET = do_POST = do_OPTIONS = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_node_batches_keep_call_order_whether_or_not_an_answer_is_new(
        hostile: tuple[str, Path, dict[str, str], dict[str, str], str], tmp_path: Path) -> None:
    url, _, _, read, ingest = hostile
    web_metrics = shipped(url, read, tmp_path)
    n = 16
    entries = ["default", "all"] * (n // 2)
    before = [i % 4 < 2 for i in range(n)]
    changed = [i % 4 in (0, 3) for i in range(n)]  # both entries, both values, changed or not
    calls = ["changing", "paid", "changing", "paid"]
    with RecordingProxy(url) as proxy:
        # First start: both answers paid for.
        first = node_devices(proxy.url, ingest, web_metrics, [
            {"dir": str(tmp_path / f"node{i}"), "entry": entries[i], "dimensions": {},
             "reports": [["paid", True], ["changing", before[i]]]} for i in range(n)], tmp_path)
        start = len(proxy.batches)
        # Second start: `changing` new iff changed (its answer charged asynchronously), first.
        second = node_devices(proxy.url, ingest, web_metrics, [
            {"dir": str(tmp_path / f"node{i}"), "entry": entries[i], "dimensions": {},
             "reports": [[m, True if m == "paid" else before[i] != changed[i]] for m in calls]}
            for i in range(n)], tmp_path)
        batches = proxy.batches[start:]
    # Each device's wire (its batches in the order sent) lists the reports in call order.
    for i, result in enumerate(second):
        assert [x["metric"] for x in result["wire"]] == calls, (i, result["wire"])
        assert len(result["ledger"]["changing"]["paid"]) == (2 if changed[i] else 1)
    # What the proxy saw: every batch in call order (each a run of the device's calls), and
    # together exactly the reports the devices sent.
    assert batches
    for batch in batches:
        order = [x["metric"] for x in batch["reports"]]
        assert any(calls[k:k + len(order)] == order for k in range(len(calls))), order
    wire = sorted(json.dumps(x, sort_keys=True) for r in second for x in r["wire"])
    assert sorted(json.dumps(x, sort_keys=True) for b in batches for x in b["reports"]) == wire
    # So "changing before paid" (and any rule on the order) is the same for every device:
    # right for exactly half of them, chance 1/2, tolerance 0.
    orders = {tuple(x["metric"] for x in r["wire"]) for r in second}
    assert len(orders) == 1
    assert sum(changed) == n // 2
    # The collector counted exactly what was sent (reports and ones, per metric).
    for metric in ("paid", "changing"):
        sent = [x for r in first + second for x in r["wire"] if x["metric"] == metric]
        assert all(x["mechanism"] == RR for x in sent)
        ones = sum(x["bit"] for x in sent)
        assert counts(url, read, metric, RR) == (len(sent), ones), metric


# -- item 7: a drifting number past the cap is never silent ----------------------------------

def test_a_drifting_number_past_the_cap_reports_every_day(
        hostile: tuple[str, Path, dict[str, str], dict[str, str], str], tmp_path: Path) -> None:
    url, metrics, admin, read, ingest = hostile
    declared = Reporter(url, metrics, storage=Storage(privacy_dir=":memory:"))
    declared_id = declared.specs["startup_ms"].mechanism.id
    declared.close(timeout=0)
    days, drift, devices = 12, 150, 6
    versions = [BitMean.from_epsilon(1.0 - j / 1000, 0, 10000) for j in range(1, 5)]
    # Four answers (one under each version) fit the cap, a fifth does not.
    assert sum(v.epsilon for v in versions) <= DEFAULT_MAX_METRIC_EPSILON
    assert sum(v.epsilon for v in versions) + versions[-1].epsilon > DEFAULT_MAX_METRIC_EPSILON
    starts = [300 + 1500 * i for i in range(devices)]
    states = [tmp_path / f"device{i}" for i in range(devices)]
    current = declared_id
    per_day: list[list[int]] = []
    for day in range(days):
        if day < len(versions):  # the operator publishes a version a day until the cap is spent
            current = publish(url, admin, {"name": "startup_ms", "kind": "numeric",
                                           "lower": 0, "upper": 10000,
                                           "mechanism": versions[day].id})
            assert current == versions[day].id
        row = []
        for i, state in enumerate(states):
            before = counts(url, read, "startup_ms", current)[0]
            with Reporter(url, metrics, token=ingest, storage=Storage(privacy_dir=state),
                          privacy=Privacy(one_per_period=False)) as reporter:
                wait_for(lambda: reporter.metrics["startup_ms"].id == current)
                reporter.report("startup_ms", min(starts[i] + drift * day, 10000))
                assert reporter.flush(timeout=10)
            row.append(counts(url, read, "startup_ms", current)[0] - before)
        per_day.append(row)
    # One report per device per day, none silent (deterministic: no tolerance).
    assert per_day == [[1] * devices] * days
    refused = 0
    for state in states:
        guard = LongitudinalGuard(state)
        try:
            spend = guard.stats()["startup_ms"]
            refused += guard.cap_refused
        finally:
            guard.close()
        assert spend.paid_values == len(versions)
        assert spend.memoized_charged <= DEFAULT_MAX_METRIC_EPSILON * (1 + 1e-12)
        assert spend.memoized_charged == pytest.approx(sum(v.epsilon for v in versions))
    assert refused > 0  # the drift met new grid points past the cap: the case is exercised
    # The collector counted what the ledgers paid for: one version a day, then the last.
    assert [counts(url, read, "startup_ms", v.id)[0] for v in versions] \
        == [devices] * (len(versions) - 1) + [devices * (days - len(versions) + 1)]
    assert counts(url, read, "startup_ms", declared_id)[0] == 0


def test_drifting_node_devices_past_the_cap_report_every_day(
        hostile: tuple[str, Path, dict[str, str], dict[str, str], str], tmp_path: Path) -> None:
    """The same drift on Node devices of deniable-client/all (the default entry has no numeric
    kind), all starting at once each simulated day: one report per device per day, the
    collector's counts per version equal to what went over the wire, each ledger at most the
    cap (in its units of 2**-1074 nats, exactly)."""
    url, _, admin, read, ingest = hostile
    web_metrics = shipped(url, read, tmp_path)
    declared_id = json.loads(web_metrics.read_text())["startup_ms"]["mechanism"]
    days, drift, devices = 10, 150, 6
    versions = [BitMean.from_epsilon(1.0 - j / 1000, 0, 10000) for j in range(1, 5)]
    starts = [300 + 1500 * i for i in range(devices)]
    ids = [declared_id]
    sent: dict[str, int] = {}
    for day in range(days):
        if day < len(versions):
            ids.append(publish(url, admin, {"name": "startup_ms", "kind": "numeric", "lower": 0,
                                            "upper": 10000, "mechanism": versions[day].id}))
        before = sum(counts(url, read, "startup_ms", m)[0] for m in ids)
        results = node_devices(url, ingest, web_metrics, [
            {"dir": str(tmp_path / f"node{i}"), "entry": "all", "dimensions": {},
             "reports": [["startup_ms", min(starts[i] + drift * day, 10000)]]}
            for i in range(devices)], tmp_path)
        for result in results:
            assert result["thrown"] == 0, result
            [report] = result["wire"]  # one report per device and day: never silent
            sent[report["mechanism"]] = sent.get(report["mechanism"], 0) + 1
        assert sum(counts(url, read, "startup_ms", m)[0] for m in ids) - before == devices
    # Each day's version taken; past the cap (4 answers) the last one carries every report.
    assert sent == {v.id: devices * (1 if j < len(versions) - 1 else days - len(versions) + 1)
                    for j, v in enumerate(versions)}
    assert {m: counts(url, read, "startup_ms", m)[0] for m in ids} == {declared_id: 0, **sent}
    cap = int(Fraction(DEFAULT_MAX_METRIC_EPSILON) * 2**1074)
    refused = 0
    for result in results:
        ledger = result["ledger"]["startup_ms"]
        assert int(ledger["spent"]) <= cap, ledger
        assert len(ledger["paid"]) == len(versions)  # one answer per version: what was sent
        # Their epsilons, as each client computes the float itself: equal within the ledger's
        # own 2**-40 rounding allowance.
        want = sum(int(Fraction(v.epsilon) * 2**1074) for v in versions)
        assert abs(int(ledger["spent"]) - want) <= want >> 40, ledger
        refused += result["stats"]["capRefused"]
    assert refused > 0  # past the cap on the last day (new grid points): the case is exercised
