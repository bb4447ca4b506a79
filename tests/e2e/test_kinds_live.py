"""End to end, for the new kinds: a real collector (gunicorn, 2 workers) on real Redis, with a
metrics file declaring a categorical, a histogram and a numeric metric. Reports are perturbed
by the mechanisms the catalogue serves, sent over HTTP in both JSON layouts, and the counts
API must give back exactly what was sent, category by category."""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.categorical import BITSET_MECHANISMS
from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.randomness import SecureBits
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV, snapshot
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

OS = ["android", "ios", "windows", "macos", "linux", "other"]
EDGES = [0, *(2 ** i for i in range(6, 70))]  # 64 buckets: SS (k = 2) at epsilon 1
METRICS = f"""\
[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
epsilon = 1.0

[metrics.startup_ms]
kind = "histogram"
edges = {json.dumps(EDGES)}
clamp = true
epsilon = 1.0

[metrics.crashes]
kind = "numeric"
lower = 0
upper = 20
epsilon = 1.0
"""


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("kinds-live"),
                                workers=2, flush=True) as process:
        yield process


def catalogue(url: str) -> dict[str, MetricSpec]:
    """name -> spec, read from the live catalogue as a client reads it."""
    doc = requests.get(f"{url}/v1/metrics", timeout=5).json()
    return {entry["name"]: MetricSpec.from_document(entry, parse_mechanism(entry["mechanism"]))
            for entry in doc["metrics"]}


def payload(spec: MetricSpec, value: object, rng: SecureBits) -> int | str:
    """One report's wire payload for a true ``value``, as a device makes it."""
    perturbed = spec.mechanism.perturb(spec.encode(value), rng)  # type: ignore[arg-type]
    if isinstance(spec.mechanism, BITSET_MECHANISMS):
        return spec.mechanism.encode_bits(perturbed)
    return perturbed


def tally(spec: MetricSpec, payloads: list[int | str]) -> list[int]:
    """What the counters must hold for these payloads: n, then one count per slot."""
    counts = [0] * spec.mechanism.width
    for value in payloads:
        for slot, by in enumerate(spec.mechanism.counts_of(value)):
            counts[slot] += by
    return counts


def read_counts(url: str, metric: str) -> tuple[dict, list[int]]:
    """The counts document and its slots summed over every bucket (a run may cross an hour)."""
    doc = requests.get(f"{url}/v1/metrics/{metric}/counts", timeout=5).json()
    summed = [sum(column) for column in zip(*(b["counts"] for b in doc["buckets"]))]
    return doc, summed


def test_every_kind_is_counted_exactly_over_http(collector: CollectorProcess,
                                                 redis_client: redis.Redis) -> None:
    url = collector.url
    specs = catalogue(url)
    assert specs["os"].mechanism.id.startswith("grr:6:")
    assert specs["startup_ms"].mechanism.id.startswith("ss:64:2:")
    assert specs["crashes"].mechanism.id.startswith("bm:")
    rng, truth = SecureBits(), random.Random(12)
    values = {"os": lambda: truth.choice(OS),
              "startup_ms": lambda: truth.choice([-5, 0, 63.9, 64, 812.5, 2.0 ** 70]),  # clamped
              "crashes": lambda: Fraction(truth.randrange(0, 41), 2)}
    sent: dict[str, list[int | str]] = {name: [] for name in values}
    for batch in range(6):
        reports = []
        for name, draw in values.items():
            for _ in range(150):
                wire = payload(specs[name], draw(), rng)
                sent[name].append(wire)
                reports.append((name, specs[name].mechanism.id, wire))
        doc = encode_batch(new_batch_id(), reports)
        if batch % 2:  # the client's compact layout, and any other JSON layout
            response = requests.post(f"{url}/v1/reports", timeout=10,
                                     data=json.dumps(doc, separators=(",", ":")),
                                     headers={"Content-Type": "application/json"})
        else:
            response = requests.post(f"{url}/v1/reports", json=doc, timeout=10)
        assert response.status_code == 202, response.text
        assert response.json()["accepted"] == 450

    for name, spec in specs.items():
        doc, counts = read_counts(url, name)
        assert doc["kind"] == spec.kind and doc["labels"] == list(spec.labels)
        assert counts == tally(spec, sent[name]), name
        assert counts[0] == 900
    # SS sets k bits per report; GRR exactly one slot per report.
    _, os_counts = read_counts(url, "os")
    assert sum(os_counts[1:]) == 900
    _, buckets = read_counts(url, "startup_ms")
    assert sum(buckets[1:]) == 900 * specs["startup_ms"].mechanism.k  # type: ignore[union-attr]
    _, numeric = read_counts(url, "crashes")
    assert len(numeric) == 2  # n and ones: 1BitMean is one bit

    # A refused batch over the wire changes nothing.
    before = snapshot(redis_client)
    bad = encode_batch(new_batch_id(), [("os", specs["os"].mechanism.id, 0),
                                        ("os", specs["os"].mechanism.id, 6)])
    refused = requests.post(f"{url}/v1/reports", json=bad, timeout=5)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["pointer"] == "/reports/1/index"
    assert snapshot(redis_client) == before
