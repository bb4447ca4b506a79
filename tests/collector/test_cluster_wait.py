"""DENIABLE_REDIS_MIN_REPLICAS: a batch is acknowledged only once WAIT saw that many replicas
confirm it. With its replica stopped a batch is answered 503 with Retry-After; once the replica
is back, the client's retry with the same batch id is acknowledged and counted once. On one
Redis with a replica, and on the cluster (WAIT on the master of the metric's slot)."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import requests

from deniable.client.wire import encode_batch, new_batch_id
from deniable.collector.embedded import RedisServer, find_redis_server, free_port
from deniable.collector.server import CollectorProcess
from tests.rediscluster import RedisClusterNodes

pytestmark = pytest.mark.slow
METRICS = {f"wt_metric_{i}": "rr:1/2:1/2" for i in range(4)}
WAIT_ENV = {"DENIABLE_AUTH": "off", "DENIABLE_RATE_LIMIT_IP_PER_SECOND": "0",
            "DENIABLE_RATE_LIMIT_KEY_PER_SECOND": "0", "DENIABLE_REDIS_MIN_REPLICAS": "1",
            "DENIABLE_REDIS_MIN_REPLICAS_TIMEOUT_SECONDS": "1",  # generous: a busy CI machine
            "DENIABLE_RETRY_AFTER_SECONDS": "2"}


@pytest.fixture(scope="module")
def wait_metrics_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wait") / "metrics.toml"
    path.write_text("".join(f'[metrics.{name}]\nmechanism = "{mech}"\n\n'
                            for name, mech in METRICS.items()))
    return path


def total(url: str, metric: str) -> int:
    answer = requests.get(f"{url}/v1/metrics/{metric}/counts", timeout=10)
    assert answer.status_code == 200, answer.text
    return sum(b["n"] for b in answer.json()["buckets"])


def post(url: str, batch: dict) -> requests.Response:
    return requests.post(f"{url}/v1/reports", json=batch, timeout=10)


class Replica:
    """A redis-server replicating ``master_port``, stopped and started at will."""

    def __init__(self, folder: Path, master_port: int) -> None:
        self.folder, self.master_port, self.port = folder, master_port, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [find_redis_server(), "--bind", "127.0.0.1", "--port", str(self.port), "--dir",
             str(self.folder), "--save", "", "--replicaof", "127.0.0.1", str(self.master_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


def wait_in_sync(master: redis.Redis, replicas: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = master.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)
                  and v.get("state") == "online"
                  and v.get("offset", -1) >= info["master_repl_offset"]]  # it acked it all
        if len(online) >= replicas:
            return
        time.sleep(0.05)
    raise AssertionError(f"no replica in sync after {timeout}s")


def check_retry_counts_once(collector: CollectorProcess, metric: str, stop: Callable[[], None],
                            start: Callable[[], None]) -> None:
    """Acknowledged with the replica; 503 without; the same batch again once it is back."""
    url = collector.url
    before = total(url, metric)
    assert post(url, encode_batch(new_batch_id(), [(metric, "rr:1/2:1/2", 1)] * 3)
                ).status_code == 202
    stop()
    batch = encode_batch(new_batch_id(), [(metric, "rr:1/2:1/2", 1)] * 5)
    refused = post(url, batch)
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "2"
    assert post(url, batch).status_code == 503  # still no replica: the retry waits again
    start()
    # The client retries (after Retry-After; quicker here) until acknowledged. A replica just
    # back may take a moment to confirm (it is still settling after its resync): 503 meanwhile.
    for _ in range(20):
        retried = post(url, batch)
        if retried.status_code != 503:
            break
        time.sleep(0.25)
    assert retried.status_code in (200, 202), collector.log_tail()  # 200: applied before, now replicated
    assert post(url, batch).status_code == 200  # and from now on a plain duplicate
    assert total(url, metric) - before == 3 + 5


def test_one_redis_acknowledges_only_what_its_replica_holds(
        tmp_path: Path, wait_metrics_file: Path) -> None:
    with RedisServer(tmp_path / "master") as master:
        master_client = redis.Redis(port=master.port)
        master_client.config_set("repl-diskless-sync-delay", 0)  # a replica syncs at once
        replica = Replica(tmp_path / "replica", master.port)
        (tmp_path / "replica").mkdir()
        replica.start()
        try:
            wait_in_sync(master_client, 1)
            with CollectorProcess(master.url, wait_metrics_file, workers=2,
                                  env=WAIT_ENV) as collector:

                def start() -> None:
                    replica.start()
                    wait_in_sync(master_client, 1)

                check_retry_counts_once(collector, "wt_metric_0", replica.stop, start)
                with redis.Redis(port=replica.port) as copy:  # the replica holds it all
                    assert copy.dbsize() == master_client.dbsize()
        finally:
            replica.stop()
            master_client.close()


@pytest.fixture(scope="module")
def wait_collector(redis_cluster: RedisClusterNodes, wait_metrics_file: Path
                   ) -> Iterator[CollectorProcess]:
    env = {**WAIT_ENV, "DENIABLE_REDIS_CLUSTER": "true"}
    with CollectorProcess(redis_cluster.url, wait_metrics_file, workers=2,
                          env=env) as collector:
        yield collector


def test_a_cluster_waits_for_the_replica_of_the_metrics_master(
        redis_cluster: RedisClusterNodes, wait_collector: CollectorProcess) -> None:
    metric = "wt_metric_1"
    master = redis_cluster.master_for(f"{{{metric}}}")
    replica = redis_cluster.replica_of(master)
    others = [m for m in METRICS if redis_cluster.master_for(f"{{{m}}}") != master]
    assert others, "every metric on one master: pick other names"

    def start() -> None:
        redis_cluster.restart(replica)
        redis_cluster.wait_healthy()

    # A metric on another master is unaffected by this replica's absence.
    stopped = [False]

    def stop() -> None:
        redis_cluster.kill(replica)
        stopped[0] = True
        elsewhere = post(wait_collector.url,
                         encode_batch(new_batch_id(), [(others[0], "rr:1/2:1/2", 1)]))
        assert elsewhere.status_code == 202, elsewhere.text

    try:
        check_retry_counts_once(wait_collector, metric, stop, start)
    finally:
        if stopped[0] and replica not in redis_cluster.processes:
            start()


def test_wait_costs_little_when_replicas_are_healthy(redis_cluster, wait_collector) -> None:
    """Many batches over every master, each acknowledged after WAIT (no 503 in steady state)."""
    before = {m: total(wait_collector.url, m) for m in METRICS}
    for i in range(40):
        batch = encode_batch(new_batch_id(), [(m, "rr:1/2:1/2", i % 2) for m in METRICS])
        assert post(wait_collector.url, batch).status_code == 202
    assert {m: total(wait_collector.url, m) - before[m] for m in METRICS} == \
        {m: 40 for m in METRICS}
