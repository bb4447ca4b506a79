"""The web client against issue 19's two attacks, end to end: a real collector (gunicorn, real
Redis, auth on) whose admin API first publishes a metric of huge epsilon, then successive
versions of another, and Node devices (web/scripts/node-churn-reporter.mjs, half on the default
entry, half on deniable-client/all), each app start a new Reporter on the device's directory.

Each device declares both metrics at ln 3 (the app's declaration is the contract): the huge
version is ignored (the declared mechanism reports, `ignoredServed` counts it), and each version
at ln 3 (no larger) is taken. What the collector counts (not what the client says) is asserted:
nothing ever under the huge mechanism, and under the versions, 2 reports (one answer, repeated
for free) per device for each of the first 4 versions (4 ln 3 = ln 81, the default cap) and none
after.

Needs `./dev test` (or `./dev setup` plus `npm ci && npm run build` in web/).
"""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import requests

from deniable.collector import auth
from deniable.collector.server import CollectorProcess
from tests.e2e.test_version_churn import (  # noqa: F401  (a fixture)
    CAP_REPORTS, secure_collector, version)
from tests.e2e.test_web_client import WEB, node

pytestmark = pytest.mark.slow

HUGE = "rr:999999999/1000000000:1/2"  # epsilon ~ 21.4: 30 of 30 bits equalled the truth
VERSIONS = CAP_REPORTS + 3
DEVICES = [("default", True), ("default", False), ("all", True), ("all", False)]


DECLARED = version(0).id  # rr:1/2:1/2, ln 3: what the app declares for both metrics


def start(url: str, state: Path, token: str, metric: str, value: bool, entry: str,
          mechanism: str) -> dict[str, object]:
    done = subprocess.run([node(), "scripts/node-churn-reporter.mjs", url, str(state), token,
                           metric, "true" if value else "false", entry, mechanism, DECLARED],
                          cwd=WEB, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    assert result["sent"] is True, result
    assert result["stats"]["deadLettered"] == 0, result  # type: ignore[index]
    return result


def counted(url: str, headers: dict[str, str], metric: str, mechanism: str) -> int:
    doc = requests.get(f"{url}/v1/metrics/{metric}/counts", headers=headers, timeout=10,
                       params={"mechanism": mechanism}).json()
    return sum(bucket["n"] for bucket in doc.get("buckets", []))


def test_node_devices_send_nothing_above_the_ceiling_and_nothing_past_the_cap(
        secure_collector: CollectorProcess, redis_client: redis.Redis, tmp_path: Path) -> None:
    url = secure_collector.url
    admin = {"Authorization": f"Bearer {auth.create_key(redis_client, 'admin').secret}"}
    read = {"Authorization": f"Bearer {auth.create_key(redis_client, 'read').secret}"}
    ingest = auth.create_key(redis_client, "ingest", "app").secret

    def publish(name: str, mechanism: str) -> None:
        published = requests.post(f"{url}/v1/admin/metrics", headers=admin, timeout=10,
                                  json={"name": name, "mechanism": mechanism})
        assert published.status_code == 201, published.text

    publish("exposed", DECLARED)
    publish("exposed", HUGE)  # a new version: the declared one stays registered
    for i, (entry, value) in enumerate(DEVICES):
        result = start(url, tmp_path / f"device{i}", ingest, "exposed", value, entry, HUGE)
        stats = result["stats"]
        assert stats["ignoredServed"]["exposed"] == 1 and stats["withheld"] == 0, stats  # type: ignore[index]
        assert result["metrics"] == {"exposed": DECLARED}, result
    assert counted(url, read, "exposed", HUGE) == 0
    assert counted(url, read, "exposed", DECLARED) == 2 * len(DEVICES)

    for j in range(VERSIONS):
        publish("churned", version(j).id)
        for i, (entry, value) in enumerate(DEVICES):
            result = start(url, tmp_path / f"device{i}", ingest, "churned", value, entry,
                           version(j).id)
            assert result["metrics"]["churned"] == version(j).id  # type: ignore[index]
            # Refused in this start: both calls once the cap is reached, none before.
            assert result["stats"]["capRefused"] == (2 if j >= CAP_REPORTS else 0), (j, result)  # type: ignore[index]
    # The collector's counts: one answer per device (sent twice) for the first 4 versions only.
    for j in range(VERSIONS):
        n = counted(url, read, "churned", version(j).id)
        assert n == (2 * len(DEVICES) if j < CAP_REPORTS else 0), (j, n)
    assert counted(url, read, "exposed", HUGE) == 0
