"""End to end, for public dimensions from the real client: a real collector (gunicorn, 2
workers) on real Redis whose metrics file declares dimensions; real Reporters, one per kind of
device, each with its device-wide ``dimensions`` (one off the list, counted as ``other``; one
without a platform; one giving its values per call). The counts API's ``?by=`` must give back
exactly what each Reporter's ledger says it sent, value by value, for every kind."""
from __future__ import annotations

import json
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterator

import pytest
import requests

from deniable.client import Delivery, Privacy, Reporter, Storage
from deniable.client.dimensions import DimensionError
from deniable.client.state import IN_MEMORY
from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics
from tests.e2e.test_dimensions_live import counts, summed

pytestmark = pytest.mark.slow  # starts servers or processes: not in the fast lane

VERSIONS = ["2.3", "2.4", "2.5"]
PLATFORMS = ["android", "ios", "web"]
METRICS = f"""\
[metrics.dark_mode]
mechanism = "rr:1/2:1/2"
combinations = [["app_version", "platform"]]
[metrics.dark_mode.dimensions.app_version]
values = {json.dumps(VERSIONS)}
other = true
[metrics.dark_mode.dimensions.platform]
values = {json.dumps(PLATFORMS)}

[metrics.os]
kind = "categorical"
categories = ["android", "ios", "windows"]
epsilon = 1.0
[metrics.os.dimensions.platform]
values = {json.dumps(PLATFORMS)}

[metrics.crashes]
kind = "histogram"
edges = [0, 1, 5, 20]
clamp = true
epsilon = 1.0
[metrics.crashes.dimensions.platform]
values = {json.dumps(PLATFORMS)}

[metrics.load]
kind = "numeric"
lower = 0
upper = 100
epsilon = 1.0
[metrics.load.dimensions.platform]
values = {json.dumps(PLATFORMS)}

[metrics.feature_x_enabled]
mechanism = "rr:1/2:1/2"
"""
DECLARED = tomllib.loads(METRICS)["metrics"]
"""The app declares what the collector registers (the same tables)."""
KINDS = ("os", "crashes", "load")  # categorical, histogram, numeric: by platform
# Each kind of device: its device-wide dimensions, per-call dims, and how many reports.
DEVICES = [
    ({"app_version": "2.4", "platform": "android"}, None, 30),
    ({"app_version": "2.3", "platform": "ios", "channel": "beta"}, None, 20),
    ({"app_version": "2.6", "platform": "ios"}, None, 12),   # off the list: other
    ({"app_version": "2.5"}, None, 9),                       # no platform: not stated
    ({}, {"app_version": "2.5", "platform": "web"}, 7),      # per call only
]


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("dims-client"),
                                workers=2, flush=True) as process:
        yield process


def test_reporters_with_dimensions_give_exact_per_value_counts(
        collector: CollectorProcess) -> None:
    url = collector.url
    dark: dict[str | None, Counter[str]] = defaultdict(Counter)  # label -> n, ones sent
    by_kind: dict[str, dict[str | None, Counter[str]]] = {
        kind: defaultdict(Counter) for kind in KINDS}
    for device, per_call, n in DEVICES:
        with Reporter(url, DECLARED, dimensions=device, storage=Storage(privacy_dir=IN_MEMORY),
                      delivery=Delivery(batch_size=25),
                      privacy=Privacy(one_per_period=False,
                                      fresh={"dark_mode", *KINDS})) as reporter:
            for i in range(n):
                reporter.report("dark_mode", i % 3 == 0, dims=per_call)
                platform = {"platform": per_call["platform"]} if per_call else None
                reporter.report("os", "ios" if i % 2 else "android", dims=platform)
                reporter.report("crashes", i % 7, dims=platform)
                reporter.report("load", 10 * (i % 11), dims=platform)
                reporter.report("feature_x_enabled", True)
            with pytest.raises(DimensionError):  # refused at the call, nothing queued
                reporter.report("feature_x_enabled", True, dims={"platform": "ios"})
            assert reporter.flush(20)
            assert reporter.stats().dead_lettered == 0
            ledger = reporter.ledger()
            sent = ledger["dark_mode"]
            assert sent.sent_n == n and ledger["feature_x_enabled"].sent_n == n
        stated = {**device, **(per_call or {})}
        app_version = stated.get("app_version")
        counted = {"platform": stated.get("platform"),
                   "app_version": app_version if app_version in VERSIONS else "other"}
        labels: list[str | None] = [None] + [f"{k}={v}" for k, v in sorted(counted.items())
                                             if v is not None]
        if counted["platform"] is not None:
            labels.append(f"app_version={counted['app_version']},"
                          f"platform={counted['platform']}")
        for label in labels:
            dark[label].update(n=sent.sent_n, ones=sent.sent_ones)
        platform_labels = [] if counted["platform"] is None else [f"platform={counted['platform']}"]
        for kind in KINDS:
            for label in [None, *platform_labels]:
                by_kind[kind][label].update(n=ledger[kind].sent_n, ones=ledger[kind].sent_ones)

    def expected(label: str | None) -> list[int]:
        found = dark.get(label)
        return [found["n"], found["ones"]] if found else []

    for by, values in (("platform", PLATFORMS), ("app_version", VERSIONS + ["other"])):
        doc = counts(url, "dark_mode", by=by)
        assert summed(doc["buckets"]) == expected(None)
        assert list(doc["series"]) == [f"{by}={v}" for v in values]
        assert {label: summed(b) for label, b in doc["series"].items()} == {
            f"{by}={v}": expected(f"{by}={v}") for v in values}
    assert expected("app_version=other")[0] == 12
    not_stated = summed(counts(url, "dark_mode")["buckets"])[0] - sum(
        summed(b)[0] for b in counts(url, "dark_mode", by="platform")["series"].values() if b)
    assert not_stated == 9  # the device without a platform
    combo = counts(url, "dark_mode", by="app_version,platform")
    assert {label: summed(b) for label, b in combo["series"].items()} == {
        label: expected(label) for label in combo["series"]}
    assert summed(combo["series"]["app_version=2.5,platform=web"])[0] == 7

    for kind in KINDS:  # n per platform for every kind; the numeric one's ones too
        by_platform = counts(url, kind, by="platform")
        total = summed(by_platform["buckets"])
        assert total[0] == by_kind[kind][None]["n"] == 78
        series = {label: summed(b) for label, b in by_platform["series"].items()}
        assert {label: (found or [0])[0] for label, found in series.items()} == {
            f"platform={p}": by_kind[kind][f"platform={p}"]["n"] for p in PLATFORMS}
        if kind == "load":
            assert total[1] == by_kind[kind][None]["ones"]
            assert {label: found[1] if found else 0 for label, found in series.items()} == {
                f"platform={p}": by_kind[kind][f"platform={p}"]["ones"] for p in PLATFORMS}
    undeclared = requests.get(f"{url}/v1/metrics/feature_x_enabled/counts",
                              params={"by": "platform"}, timeout=10)
    assert undeclared.status_code == 404
