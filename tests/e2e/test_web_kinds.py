"""The web client's kinds beyond boolean end to end: Node (deniable-client/all, its file queue
and the Python client's secret file) reports categorical (GRR, OUE, subset selection),
histogram and numeric metrics to a real gunicorn collector on real Redis, and the collector's
counts equal, slot by slot, what deniable.client.memo.memo_value computes from that secret.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/): node and the
built web/dist.
"""
from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
import requests

from deniable.client.categorical import BITSET_MECHANISMS, UnaryEncoding, domain_tag
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_key, memo_value, spend_tag, value_tag
from deniable.client.state import StateDir
from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics
from tests.e2e.test_web_client import WEB, node, web_declarations

pytestmark = pytest.mark.slow

OS = ["android", "ios", "windows", "macos", "linux", "other"]
LOCALES = [f"l{i}" for i in range(64)]
EDGES = [0, 1, 2, 5, 10, 100]
OUE_ID = UnaryEncoding(6, Fraction(1, 4), domain_tag(OS)).id
METRICS = f"""\
[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
epsilon = 2.0

[metrics.os_oue]
kind = "categorical"
categories = {json.dumps(OS)}
mechanism = "{OUE_ID}"

[metrics.locale]
kind = "categorical"
categories = {json.dumps(LOCALES)}
epsilon = 1.0

[metrics.crashes_per_week]
kind = "histogram"
edges = {json.dumps(EDGES)}
clamp = true
epsilon = 2.0

[metrics.startup_ms]
kind = "numeric"
lower = 0
upper = 10000
clamp = true
epsilon = 1.0

[metrics.dark_mode]
mechanism = "rr:3/4:1/2"
"""


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("web-kinds"),
                                workers=2, flush=True) as process:
        yield process


def summed_counts(url: str, metric: str) -> list[int]:
    doc = requests.get(f"{url}/v1/metrics/{metric}/counts", timeout=5).json()
    return [sum(column) for column in zip(*(b["counts"] for b in doc["buckets"]))]


def test_node_reports_every_kind_as_python_memoizes_it(collector: CollectorProcess,
                                                      tmp_path: Path) -> None:
    secret = StateDir(tmp_path / "privacy").secret()  # made by the Python client
    doc = requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
    specs = {e["name"]: MetricSpec.from_document(e, parse_mechanism(e["mechanism"]))
             for e in doc["metrics"] if e.get("kind", "boolean") != "boolean"}
    assert {s.mechanism.id.split(":")[0] for s in specs.values()} == {"grr", "oue", "ss", "bm"}
    truth = random.Random(2026)
    values = {"os": lambda: truth.choice(OS), "os_oue": lambda: truth.choice(OS),
              "locale": lambda: truth.choice(LOCALES[:5]),
              "crashes_per_week": lambda: truth.choice([-1, 0, 0.5, 1, 3, 7.25, 99.5, 100, 1e9]),
              "startup_ms": lambda: truth.choice([0, 812.5, 0.1, 1234.5678, 9999.99, 10_000,
                                                  -5, 1e12, 4321])}
    reports = [[name, draw()] for _ in range(60) for name, draw in values.items()]
    reports += [["dark_mode", True]] * 10
    path = tmp_path / "reports.json"
    path.write_text(json.dumps(reports))
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(web_declarations(doc)))
    done = subprocess.run([node(), "scripts/node-kinds-reporter.mjs", collector.url,
                           str(tmp_path), str(path), str(metrics)], cwd=WEB,
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["sent"] is True and result["stats"]["queued"] == 0, result
    assert result["metrics"]["os"] == specs["os"].mechanism.id
    for name, spec in specs.items():
        mechanism = spec.mechanism
        want = [0] * mechanism.width
        for metric, value in reports:
            if metric != name:
                continue
            answer = memo_value(secret, name, mechanism, spec.encode(value))  # type: ignore[arg-type]
            wire = mechanism.encode_bits(answer) if isinstance(mechanism, BITSET_MECHANISMS) \
                else answer
            for slot, by in enumerate(mechanism.counts_of(wire)):
                want[slot] += by
        assert summed_counts(collector.url, name) == want, name
    assert summed_counts(collector.url, "dark_mode")[0] == 10


def _strings(doc: object) -> Iterator[str]:
    """Every key, string and number in a JSON document, as text."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(doc, list):
        for value in doc:
            yield from _strings(value)
    else:
        yield json.dumps(doc)


def test_no_file_a_node_device_writes_holds_a_value_it_reported(collector: CollectorProcess,
                                                               tmp_path: Path) -> None:
    """Issue 27: the ledger held the true values in clear. Two Node devices report every kind;
    then every file they wrote is scanned for every value reported (none found), and the
    ledger's tags are exactly Python's HMAC tags (spend_tag, value_tag) under their secrets."""
    doc = requests.get(f"{collector.url}/v1/metrics", timeout=5).json()
    specs = {e["name"]: MetricSpec.from_document(e, parse_mechanism(e["mechanism"]))
             for e in doc["metrics"] if e.get("kind", "boolean") != "boolean"}
    dark = next(RandomizedResponse.from_id(e["mechanism"]) for e in doc["metrics"]
                if e["name"] == "dark_mode")
    devices = {
        "a": [["os", "macos"], ["locale", "l7"], ["crashes_per_week", 7.25],
              ["startup_ms", 1234.5678], ["startup_ms", 812.5], ["dark_mode", True]],
        "b": [["os", "windows"], ["os_oue", "linux"], ["crashes_per_week", 99.5],
              ["startup_ms", 9999.99], ["dark_mode", False]],
    }
    for name, reports in devices.items():
        home = tmp_path / name
        secret = StateDir(home / "privacy").secret()
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(reports))
        metrics = tmp_path / "metrics.json"  # the app's declarations (outside the device's dir)
        metrics.write_text(json.dumps(web_declarations(doc)))
        done = subprocess.run([node(), "scripts/node-kinds-reporter.mjs", collector.url,
                               str(home), str(path), str(metrics)], cwd=WEB,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["sent"] is True
        files = sorted(p for p in home.rglob("*") if p.is_file())
        assert [p.relative_to(home).as_posix() for p in files] == ["privacy/secret", "queue.json"]
        state = json.loads((home / "queue.json").read_text())
        # The catalogue cached is the collector's public document (labels of every category);
        # everything else the device keeps must not depend on what it reported.
        assert state.pop("catalogue") == doc
        kept = set(_strings(state))
        raw = json.dumps(state).encode()  # (the secret file is 32 random bytes)
        want: dict[str, set[str]] = {}
        for metric, value in reports:
            if metric == "dark_mode":
                tag = spend_tag(secret, metric, dark, int(value))
            else:
                spec = specs[metric]
                key = memo_key(secret, metric, spec.mechanism,  # type: ignore[arg-type]
                               spec.encode(value))
                tag = value_tag(secret, metric, spec.mechanism, key)  # type: ignore[arg-type]
                assert f"{spec.mechanism.id}\x00{key}" not in raw.decode("latin-1")
            want.setdefault(metric, set()).add(tag)
            for spelled in {json.dumps(value), str(value), repr(value)}:
                assert spelled.encode() not in raw or spelled in ("true", "false", "True",
                                                                   "False"), (name, spelled)
                assert spelled not in kept or spelled in ("true", "false")
        assert b"\\u0000" not in (home / "queue.json").read_bytes()
        assert {m: set(e["paid"]) for m, e in state["ledger"].items()} == want
