"""End to end, for public dimensions: a real collector (gunicorn, 2 workers) on real Redis, with
a metrics file declaring a boolean metric broken down by app version and platform (and their
combination) and a categorical one by platform. Batches with dims go over HTTP; the counts API
must give back, series by series, exactly what was sent: ``?by=`` every value of a dimension
(``other`` included) beside the total, ``?series=`` one of them."""
from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.randomness import SecureBits
from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV, snapshot
from tests.servers import collector_with_metrics

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

RR = "rr:1/2:1/2"
VERSIONS = ["2.3", "2.4", "2.5"]
PLATFORMS = ["android", "ios", "web"]
OS = ["android", "ios", "windows", "macos", "linux"]
METRICS = f"""\
[metrics.dark_mode]
mechanism = "{RR}"
combinations = [["app_version", "platform"]]
[metrics.dark_mode.dimensions.app_version]
values = {json.dumps(VERSIONS)}
other = true
[metrics.dark_mode.dimensions.platform]
values = {json.dumps(PLATFORMS)}

[metrics.os]
kind = "categorical"
categories = {json.dumps(OS)}
epsilon = 1.0
[metrics.os.dimensions.platform]
values = {json.dumps(PLATFORMS)}
"""


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("dims-live"),
                                workers=2, flush=True) as process:
        yield process


def summed(buckets: list[dict]) -> list[int]:
    """The counter slots summed over every bucket (a run may cross an hour), or []."""
    return [sum(column) for column in zip(*(b["counts"] for b in buckets))]


def counts(url: str, metric: str, **query: str) -> dict:
    answer = requests.get(f"{url}/v1/metrics/{metric}/counts", params=query, timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()


class Expected:
    """What the counters must hold: the total and each series label's slots."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.series: dict[str | None, list[int]] = defaultdict(lambda: [0] * width)

    def add(self, labels: list[str], row: tuple[int, ...]) -> None:
        for label in [None, *labels]:
            self.series[label] = [a + b for a, b in zip(self.series[label], row)]

    def of(self, label: str | None) -> list[int]:
        """A series' slots, [] if nothing was counted in it (as ``summed`` gives)."""
        found = self.series.get(label)
        return found if found is not None and found[0] else []


def test_breakdowns_over_http_count_every_series_exactly(collector: CollectorProcess,
                                                         redis_client: redis.Redis) -> None:
    url = collector.url
    catalogue = {m["name"]: m for m in requests.get(f"{url}/v1/metrics", timeout=10)
                 .json()["metrics"]}
    assert catalogue["dark_mode"]["dimensions"]["app_version"] == {"values": VERSIONS,
                                                                   "other": True}
    assert catalogue["dark_mode"]["combinations"] == [["app_version", "platform"]]
    os_entry = catalogue["os"]
    os_spec = MetricSpec.from_document(os_entry, parse_mechanism(os_entry["mechanism"]))
    os_id = os_spec.mechanism.id
    assert os_id.startswith("grr:5:")

    rng, truth = SecureBits(), random.Random(13)
    dark, os_expected = Expected(2), Expected(os_spec.mechanism.width)
    unstated: Counter[str] = Counter()  # dark_mode reports that left a dimension out
    for batch in range(6):
        reports: list[tuple] = []
        for _ in range(200):
            dims: dict[str, str] = {}
            if truth.random() < 0.8:
                dims["platform"] = truth.choice(PLATFORMS)
            if truth.random() < 0.7:  # now and then a version off the list: counted as other
                dims["app_version"] = truth.choice(VERSIONS + ["2.6", "3.0-beta"])
            bit = parse_mechanism(RR).perturb(truth.random() < 0.4, rng)  # type: ignore[arg-type]
            reports.append(("dark_mode", RR, bit, dims))
            unstated.update({"platform", "app_version"} - dims.keys())
            counted = {k: (v if k == "platform" or v in VERSIONS else "other")
                       for k, v in dims.items()}
            labels = [f"{k}={v}" for k, v in sorted(counted.items())]
            if len(counted) == 2:
                labels.append(f"app_version={counted['app_version']},"
                              f"platform={counted['platform']}")
            dark.add(labels, (1, bit))
        for _ in range(100):
            platform = truth.choice(PLATFORMS + [None])
            index = os_spec.mechanism.perturb(truth.randrange(5), rng)  # type: ignore[arg-type]
            reports.append(("os", os_id, index, {"platform": platform} if platform else None))
            os_expected.add([f"platform={platform}"] if platform else [],
                            os_spec.mechanism.counts_of(index))
        doc = encode_batch(new_batch_id(), reports)
        if batch % 2:  # the client's compact layout, and any other JSON layout
            answer = requests.post(f"{url}/v1/reports", timeout=10,
                                   data=json.dumps(doc, separators=(",", ":")),
                                   headers={"Content-Type": "application/json"})
        else:
            answer = requests.post(f"{url}/v1/reports", json=doc, timeout=10)
        assert (answer.status_code, answer.json()["accepted"]) == (202, 300), answer.text

    # Each marginal: every value, other included, beside the total.
    for by, values in (("platform", PLATFORMS), ("app_version", VERSIONS + ["other"])):
        doc = counts(url, "dark_mode", by=by)
        assert doc["by"] == by and summed(doc["buckets"]) == dark.of(None)
        assert list(doc["series"]) == [f"{by}={v}" for v in values]
        assert {label: summed(b) for label, b in doc["series"].items()} == {
            label: dark.of(label) for label in doc["series"]}
        # Reports that did not state the dimension are the total less its series.
        stated = sum(summed(b)[0] for b in doc["series"].values() if b)
        assert dark.of(None)[0] - stated == unstated[by] > 0
    assert dark.of("app_version=other")[0] > 0  # the off-list versions were counted as other
    # The declared combination: one series per combined value.
    combo = counts(url, "dark_mode", by="app_version,platform", granularity="day")
    assert len(combo["series"]) == 4 * 3
    assert {label: summed(b) for label, b in combo["series"].items()} == {
        label: dark.of(label) for label in combo["series"]}
    assert sum(1 for b in combo["series"].values() if b) == 12
    # One series alone.
    ios = counts(url, "dark_mode", series="platform=ios")
    assert ios["series"] == "platform=ios" and summed(ios["buckets"]) == dark.of("platform=ios")
    # The categorical metric: every category slot, per platform.
    by_platform = counts(url, "os", by="platform")
    assert summed(by_platform["buckets"]) == os_expected.of(None)
    assert {label: summed(b) for label, b in by_platform["series"].items()} == {
        f"platform={p}": os_expected.of(f"platform={p}") for p in PLATFORMS}
    assert sum(os_expected.of(f"platform={p}")[0] for p in PLATFORMS) < 600  # some unstated

    # A refused batch over the wire changes nothing.
    before = snapshot(redis_client)
    bad = encode_batch(new_batch_id(), [("dark_mode", RR, 1, {"platform": "ios"}),
                                        ("os", os_id, 0, {"platform": "tv"})])
    refused = requests.post(f"{url}/v1/reports", json=bad, timeout=10)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["pointer"] == "/reports/1/dims/platform"
    assert snapshot(redis_client) == before
    unknown = requests.get(f"{url}/v1/metrics/os/counts", params={"by": "app_version"},
                           timeout=10)
    assert unknown.status_code == 404 and unknown.json()["errors"][0]["parameter"] == "by"
