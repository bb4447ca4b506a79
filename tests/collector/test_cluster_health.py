"""Readiness and ``deniable_redis_up`` on the real Redis Cluster follow whether writes can
succeed: with a master and its replica killed the cluster fails (``cluster_state:fail``), every
live master answers CLUSTERDOWN, and the collector says not ready, where a PING of a live node
still answered PONG."""
from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.server import CollectorProcess
from tests.conftest import OPEN_ENV
from tests.rediscluster import RedisClusterNodes

pytestmark = pytest.mark.slow
METRIC, MECHANISM = "health_probe_metric", "rr:1/2:1/2"


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert match is not None, f"{name} missing from /metrics"
    return float(match.group(1))


def post(url: str) -> int:
    batch = encode_batch(new_batch_id(), [(METRIC, MECHANISM, 1)])
    return requests.post(f"{url}/v1/reports", json=batch, timeout=10).status_code


def wait_for(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


def test_a_failed_cluster_is_not_ready_and_redis_up_is_0(
        redis_cluster: RedisClusterNodes, tmp_path: Path) -> None:
    path = tmp_path / "metrics.toml"
    path.write_text(f'[metrics.{METRIC}]\nmechanism = "{MECHANISM}"\n')
    env = {**OPEN_ENV, "DENIABLE_REDIS_CLUSTER": "true", "DENIABLE_REDIS_TIMEOUT_SECONDS": "1",
           "DENIABLE_RETRY_AFTER_SECONDS": "1"}
    with CollectorProcess(redis_cluster.url, path, workers=1, env=env) as collector:
        url = collector.url
        assert requests.get(f"{url}/readyz", timeout=10).status_code == 200
        assert metric(requests.get(f"{url}/metrics", timeout=10).text, "deniable_redis_up") == 1
        assert post(url) == 202
        # The victim is not the metric's master: writes to a live master fail all the same.
        alive = redis_cluster.master_for(f"{{{METRIC}}}")
        victim = next(port for port in redis_cluster.masters() if port != alive)
        replica = redis_cluster.replica_of(victim)
        try:
            redis_cluster.kill(replica)
            redis_cluster.kill(victim)
            with redis_cluster.client(alive) as node:
                wait_for(lambda: node.cluster("INFO")["cluster_state"] == "fail", 30,
                         "the cluster fails")
                assert node.ping()  # what readiness asked before: the live node answers
            answer = requests.get(f"{url}/readyz", timeout=20)
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "1"
            text = requests.get(f"{url}/metrics", timeout=20).text
            assert metric(text, "deniable_redis_up") == 0
            assert metric(text, 'deniable_storage_errors_total{kind="ClusterDownError"}') > 0
            assert post(url) == 503  # ingest agrees with readiness
        finally:
            for port in (victim, replica):
                if port not in redis_cluster.processes:
                    redis_cluster.restart(port)
            redis_cluster.wait_healthy()
        # No restart of the collector: ready again once the cluster is.
        wait_for(lambda: requests.get(f"{url}/readyz", timeout=20).status_code == 200, 30,
                 "ready again")
        assert metric(requests.get(f"{url}/metrics", timeout=10).text, "deniable_redis_up") == 1
        assert post(url) == 202
