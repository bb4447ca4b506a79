"""End to end, open-domain discovery (issue 33): a real collector (gunicorn, 2 workers) on a
real redis-server, a metrics file declaring ``kind = "open"``, 80,000 devices reporting
through the real client code, and ``deniable report --redis-url`` discovering the known top 10
and nothing else.

The devices: 40 are real ``Reporter`` instances (in-memory privacy state, one each) that send
over HTTP; the others draw their answer exactly as the client's privacy layer does (an open
metric is always fresh: ``sketch.perturb_padded`` with the secure rng ``SecureBits``,
``LongitudinalGuard.perturb_string``'s own call and law), and are sent in batches of 1,000 in
the client's wire format.

False-failure rate (from the decoder's stated z; docs/discovery.md): od:8 at epsilon 4 (g = 56,
p = 0.498), 80,000 reports, 10,000 per level. At most 64 x 256 + 64 x 8 = 16,896 complete
strings are tested, so z <= 6.78 (1 - confidence = 1e-7, Bonferroni). Each top string's pooled
share is >= 14.5 standard errors (the 8-byte "é-crash", 6.5 %, one level: se 0.0045; the
rarest, "gc", 5 %, pools 7 levels), a margin >= 7.7 over z: missed with probability < 1e-14.
At every level each top prefix is >= 12 standard errors up; it leaves the beam of 64 only if
it falls below 6 (< 1e-9 per string and level: < 1e-7 in all) or 40 of at most 16,384
zero-share prefixes exceed 6 (expected count 3e-5 for one). Nothing outside the top 10 is
shown: a share-0 string with probability <= 1e-7 (the Bonferroni bound); a tail string
(0.0125 %, 0.03 standard errors) at most that plus a negligible shift. Overall < 1e-6. The
devices' coins are the system's (not seeded): that rate is the test's real one.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
import requests

from deniable.audit.privacy_scan import scan_redis
from deniable.cli.main import main
from deniable.client import Privacy, Reporter, Storage
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.open_domain import OpenDomainSketch
from deniable.client.randomness import SecureBits
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from deniable.core import keys
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

METRICS = """\
[metrics.crash_sig]
kind = "open"
epsilon = 4.0
max_bytes = 8
period = "day"

[metrics.dark_mode]
epsilon = 1.0
"""
TOP = {"oom": 11_200, "segv@0x1": 9_600, "npe:42": 8_000, "anr.main": 7_200, "abort()": 6_400,
       "sigbus": 5_600, "é-crash": 5_200, "ui/hang": 4_800, "net:503": 4_400, "gc": 4_000}
TAIL = {f"t{i:05d}": 10 for i in range(1_360)}
REAL_REPORTERS = 40  # of the "oom" devices


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[CollectorProcess, Path]]:
    # flush: the session's redis-server is shared: leave no registry or counters behind
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("discovery-live"),
                                flush=True) as process:
        yield process, Path(process.metrics_file)


def _catalogue_spec(url: str) -> MetricSpec:
    doc = requests.get(f"{url}/v1/metrics", timeout=5).json()
    entry = next(e for e in doc["metrics"] if e["name"] == "crash_sig")
    return MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"]))


def test_the_known_top_10_is_discovered_and_nothing_else(collector, redis_url: str,  # type: ignore[no-untyped-def]
                                                         capsys, tmp_path: Path) -> None:
    process, metrics_file = collector
    spec = _catalogue_spec(process.url)
    sketch = spec.mechanism
    assert isinstance(sketch, OpenDomainSketch) and sketch.max_bytes == 8 and sketch.g == 56
    population = {**TOP, **TAIL}
    n = sum(population.values())
    assert n == 80_000

    for _ in range(REAL_REPORTERS):  # the real client, one device each
        with Reporter(process.url, {"crash_sig": spec}, storage=Storage(privacy_dir=":memory:"),
                      privacy=Privacy(max_epsilon=4.0)) as device:  # above the default ceiling, knowingly
            device.report("crash_sig", "oom")
            assert device.flush(30)

    reports = []
    rng = SecureBits()
    for value, devices in population.items():
        padded = spec.encode(value)
        for _ in range(devices - (REAL_REPORTERS if value == "oom" else 0)):
            cell = sketch.perturb_padded(padded, rng)  # type: ignore[arg-type]
            reports.append(("crash_sig", sketch.id, cell))
    with requests.Session() as session:
        for first in range(0, len(reports), 1000):
            answer = session.post(f"{process.url}/v1/reports", timeout=30,
                                  json=encode_batch(new_batch_id(), reports[first:first + 1000]))
            assert answer.status_code == 202, answer.text

    # The counters: one day string of 4 x width bytes, n in slot 0; nothing per string.
    client = redis.Redis.from_url(redis_url)
    (key,) = client.keys(keys.OPEN_COUNTERS_PATTERN)
    raw = client.get(key)
    assert raw is not None and len(raw) == 4 * sketch.width
    counters = np.frombuffer(raw, dtype=keys.COUNTER_DTYPE)
    assert counters[0] == n and counters[1:].sum() == n
    assert scan_redis(client) == []  # the day string is in the key layout, expiring on the hour

    assert main(["report", "--redis-url", redis_url, "--metrics-file", str(metrics_file),
                 "--metric", "crash_sig", "--format", "json",
                 "--confidence", "0.9999999"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["open"]
    window = doc["periods"][0]
    assert window["period"] == "window" and window["n"] == n
    found = {f["string"]: f for f in window["found"]}
    assert set(found) == set(TOP)
    for string, f in found.items():
        assert f["lower"] > 0
    assert 0 < window["min_share"] < min(TOP.values()) / n
    assert len(doc["periods"]) == 2  # the window and its one day

    # Over HTTP (GET /v1/metrics/crash_sig/counts: day buckets of non-zero cells): the same.
    assert main(["report", "--collector", process.url, "--metric", "crash_sig", "--format",
                 "json", "--confidence", "0.9999999"]) == 0
    (over_http,) = json.loads(capsys.readouterr().out)["open"]
    assert over_http == doc

    assert main(["report", "--redis-url", redis_url, "--metrics-file", str(metrics_file),
                 "--metric", "crash_sig", "--confidence", "0.9999999"]) == 0
    text = capsys.readouterr().out
    assert "smallest discoverable share" in text and "'gc'" in text

    # HTML: the open metric's section, escaped, in the same page as the other metrics'.
    page = tmp_path / "report.html"
    assert main(["report", "--redis-url", redis_url, "--metrics-file", str(metrics_file),
                 "--confidence", "0.9999999", "--html", str(page)]) == 0
    written = page.read_text(encoding="utf-8")
    assert "<code>net:503</code>" in written and "dark_mode" in written
    capsys.readouterr()

    # Every metric, one JSON document: the open one's discoveries under "open".
    assert main(["report", "--redis-url", redis_url, "--metrics-file", str(metrics_file),
                 "--format", "json", "--confidence", "0.9999999"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert [m["metric"] for m in both["open"]] == ["crash_sig"]
    assert "dark_mode" in json.dumps(both["metrics"])


def test_the_dashboard_shows_what_the_report_discovers(collector, capsys) -> None:  # type: ignore[no-untyped-def]
    """``deniable serve`` hands the analysis' decoder to the dashboard: its window (and its one
    day) lists what ``deniable report`` lists, at the same confidence (0.95 here). Whatever the
    reports sent before (this module's first test or none), both read the same counters."""
    process, _ = collector
    answer = requests.get(f"{process.url}/dashboard/data", params={"metric": "crash_sig"},
                          timeout=60)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["view"] == "discovery" and body["confidence"] == 0.95
    assert main(["report", "--collector", process.url, "--metric", "crash_sig", "--format",
                 "json", "--confidence", "0.95"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["open"]
    if not body["days"]:
        assert body["discovery"] is None and doc["periods"] == []
        return
    window = doc["periods"][0]
    assert window["period"] == "window"
    assert {k: body["discovery"][k] for k in window if k != "period"} == \
        {k: v for k, v in window.items() if k != "period"}
    day = body["days"][-1]["day"]
    one = requests.get(f"{process.url}/dashboard/data",
                       params={"metric": "crash_sig", "day": day}, timeout=60).json()
    (reported,) = [p for p in doc["periods"] if p["period"] == day]
    assert one["discovery"]["found"] == reported["found"]
