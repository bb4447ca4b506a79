"""The web client's public dimensions end to end: Node (deniable-client/all, one Reporter per
kind of device, each with its file queue and the Python client's secret file) reports a
boolean and a categorical metric with dimensions to a real gunicorn collector on real Redis:
device-wide values (one off the list, counted as ``other``; an undeclared one, not sent; one
device without a platform), and per-call values. The counts API's ``?by=`` must give back,
series by series and slot by slot, exactly what those reports carried: each device's answers
are what ``deniable.client.memo`` computes from its secret, and the dimensions are known.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/): node and the
built web/dist.
"""
from __future__ import annotations

import json
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from deniable.client.kinds import MetricSpec, parse_mechanism
from deniable.client.mechanism import RandomizedResponse
from deniable.client.memo import memo_bit, memo_value
from deniable.client.state import StateDir
from deniable.collector.server import CollectorProcess
from tests.servers import collector_with_metrics
from tests.e2e.test_dimensions_client import DEVICES, METRICS, PLATFORMS, VERSIONS
from tests.e2e.test_dimensions_live import counts, summed
from tests.e2e.test_web_client import WEB, node, web_declarations

pytestmark = pytest.mark.slow

# METRICS, DEVICES, VERSIONS and PLATFORMS are the Python client's dimensions test's: the web
# client is held to the same metrics, devices and counts.
OS = ["android", "ios", "windows"]  # the categories of METRICS' os


@pytest.fixture(scope="module")
def collector(redis_url: str, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[CollectorProcess]:
    with collector_with_metrics(redis_url, METRICS, tmp_path_factory.mktemp("web-dims"),
                                workers=2, flush=True) as process:
        yield process


def test_node_reports_with_dimensions_give_exact_per_series_counts(
        collector: CollectorProcess, tmp_path: Path) -> None:
    url = collector.url
    catalogue = {e["name"]: e for e in
                 requests.get(f"{url}/v1/metrics", timeout=5).json()["metrics"]}
    os_spec = MetricSpec.from_document(catalogue["os"],
                                       parse_mechanism(catalogue["os"]["mechanism"]))
    rr = RandomizedResponse.from_id(catalogue["dark_mode"]["mechanism"])
    devices = []
    for i, (device, per_call, n) in enumerate(DEVICES):
        platform = {"platform": per_call["platform"]} if per_call else None
        reports: list[list[object]] = []
        for j in range(n):
            reports += [["dark_mode", j % 3 == 0, per_call], ["os", OS[j % 3], platform],
                        ["feature_x_enabled", True, None]]
        reports.append(["feature_x_enabled", True, {"platform": "ios"}])  # refused at the call
        devices.append({"dimensions": device, "reports": reports})
        StateDir(tmp_path / str(i) / "privacy").secret()  # made by the Python client
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(devices))
    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps(web_declarations({"metrics": list(catalogue.values())})))
    done = subprocess.run([node(), "scripts/node-dims-reporter.mjs", url, str(tmp_path),
                           str(path), str(metrics)], cwd=WEB, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)
    assert [(r["sent"], r["refused"], r["stats"]["queued"], r["stats"]["deadLettered"])
            for r in results] == [(True, 1, 0, 0)] * len(DEVICES), results

    # What the collector must hold: per series label (None: the total), the counter slots.
    dark: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    by_os: dict[str | None, list[int]] = defaultdict(lambda: [0] * os_spec.mechanism.width)
    for i, (device, per_call, _) in enumerate(DEVICES):
        secret = StateDir(tmp_path / str(i) / "privacy").secret()
        stated = {**device, **(per_call or {})}
        version = "other" if stated["app_version"] not in VERSIONS else stated["app_version"]
        dark_labels: list[str | None] = [None, f"app_version={version}"]
        os_labels: list[str | None] = [None]
        if "platform" in stated:
            dark_labels += [f"platform={stated['platform']}",
                            f"app_version={version},platform={stated['platform']}"]
            os_labels.append(f"platform={stated['platform']}")
        for metric, value, _ in devices[i]["reports"]:
            if metric == "dark_mode":
                bit = memo_bit(secret, "dark_mode", rr, int(value))
                for label in dark_labels:
                    dark[label][0] += 1
                    dark[label][1] += bit
            elif metric == "os":
                answer = memo_value(secret, "os", os_spec.mechanism, os_spec.encode(value))
                for label in os_labels:
                    for slot, by in enumerate(os_spec.mechanism.counts_of(answer)):
                        by_os[label][slot] += by

    def served(metric: str, by: str | None = None) -> dict[str | None, list[int]]:
        doc = counts(url, metric, **({"by": by} if by else {}))
        found: dict[str | None, list[int]] = {None: summed(doc["buckets"])}
        found.update({label: summed(b) for label, b in doc.get("series", {}).items() if b})
        return found

    for by in ("app_version", "platform", "app_version,platform"):
        got = served("dark_mode", by)
        want = {label: v for label, v in dark.items()
                if label is None or (label.count(",") == by.count(",") and
                                     label.split("=")[0] == by.split(",")[0])}
        assert got == want, by
    assert dark["app_version=other"][0] == 12 and dark["app_version=2.5,platform=web"][0] == 7
    assert dark[None][0] - sum(dark[f"platform={p}"][0] for p in PLATFORMS) == 9  # not stated
    assert served("os", "platform") == dict(by_os)
    assert by_os[None][0] == 78
    x = RandomizedResponse.from_id(catalogue["feature_x_enabled"]["mechanism"])
    ones = sum(n * memo_bit(StateDir(tmp_path / str(i) / "privacy").secret(),
                            "feature_x_enabled", x, 1) for i, (_, _, n) in enumerate(DEVICES))
    assert served("feature_x_enabled") == {None: [78, ones]}  # declares none: no series
    undeclared = requests.get(f"{url}/v1/metrics/feature_x_enabled/counts",
                              params={"by": "platform"}, timeout=10)
    assert undeclared.status_code == 404
