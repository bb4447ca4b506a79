"""The store on a real 3-master Redis Cluster: batches spanning metrics on different slots are
applied per metric, exactly once, and a conflicting reuse of a batch id changes nothing, even
when the reusing batches race."""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest
import redis.cluster

from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.core import keys
from deniable.collector.embedded import RedisServer, find_redis_server, free_port
from deniable.collector.store import Outcome, Store, _counter_args, connect
from tests.conftest import BATCH_SECRET, hour_counts

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("redis-cli") is None,
                                 reason="redis-cli is needed to create a cluster")]
METRICS = {f"metric_{i}": "rr:1/2:1/2" for i in range(12)}  # spread over all three masters


def _until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"after {timeout} s, still not: {what}")
        time.sleep(0.05)


def cluster_port() -> int:
    while (port := free_port()) > 55000:  # the cluster bus listens on port + 10000
        pass
    return port


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    nodes = []
    try:
        for i in range(3):
            port = cluster_port()
            folder = tmp_path_factory.mktemp(f"cluster{i}")
            process = subprocess.Popen(
                [find_redis_server(), "--bind", "127.0.0.1", "--port", str(port), "--dir",
                 str(folder), "--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
                 "--cluster-config-file", "nodes.conf", "--logfile", "redis.log"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            nodes.append((port, process))
        for port, _ in nodes:  # 30 s each: a loaded machine starts redis-server slowly
            probe = RedisServer(port=port)
            _until(probe._pings, f"cluster node {port} answers PING")
        subprocess.run(["redis-cli", "--cluster", "create",
                        *[f"127.0.0.1:{port}" for port, _ in nodes],
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, capture_output=True, timeout=30)
        url = f"redis://127.0.0.1:{nodes[0][0]}/0"
        _until(lambda: "cluster_state:ok" in subprocess.run(
            ["redis-cli", "-p", str(nodes[0][0]), "cluster", "info"],
            capture_output=True, text=True).stdout, "the cluster is ok")
        yield url
    finally:
        for _, process in nodes:
            process.terminate()
            process.wait(timeout=10)


def test_a_batch_over_many_slots_is_counted_once_per_metric(cluster_url: str) -> None:
    client = connect(cluster_url, cluster=True)
    assert isinstance(client, redis.cluster.RedisCluster)
    store = Store(client, BATCH_SECRET)
    try:
        slots = {client.keyslot(keys.counters(m, "rr:1/2:1/2", datetime.now(timezone.utc)))
                 for m in METRICS}
        assert len({client.get_node_from_key(keys.batch_applied(m, "x")).port for m in METRICS}) == 3
        assert len(slots) == len(METRICS)
        reports = [(m, mech, i % 2) for i, (m, mech) in enumerate(METRICS.items())] * 3
        batch = decode_batch(encode_batch(new_batch_id(), reports), METRICS)
        now = datetime.now(timezone.utc)
        retention = {m: 90 for m in METRICS}
        assert store.add_batch(batch, now, retention, 3600) is Outcome.APPLIED
        assert store.add_batch(batch, now, retention, 3600) is Outcome.DUPLICATE
        for i, metric in enumerate(METRICS):
            assert store.counts(metric, "rr:1/2:1/2", keys.bucket_start(now),
                                keys.bucket_start(now) + keys.BUCKET)[0].n == 3

        # Each metric marks the batch in its marker hash for the claim's expiry hour: one field
        # (the id's 16 bytes, value 1) per batch, no key per batch and metric.
        expire_at = keys.expire_at_hour(now, 3600)
        assert client.expiretime(keys.batch(batch.batch_id)) == expire_at
        for metric in METRICS:
            markers = keys.batch_markers(metric, expire_at)
            assert client.hget(markers, keys.marker_field(batch.batch_id)) == b"1"
            assert client.expiretime(markers) == expire_at
            assert not client.exists(keys.batch_applied(metric, batch.batch_id))

        # A partial first attempt (one metric written, then a crash): the re-send completes it.
        partial = decode_batch(encode_batch(new_batch_id(), reports), METRICS)
        first = next(iter(partial.tallies))
        record = store.batch_record(partial)
        assert client.set(keys.batch(partial.batch_id), record, exat=expire_at)  # the id claimed
        hour = keys.hour_index(now)
        store._ingest(keys=[keys.batch_markers(first, expire_at),
                            keys.counters(first, "rr:1/2:1/2", now)],
                      args=["1", expire_at, keys.marker_field(partial.batch_id),
                            *_counter_args(keys.month_of(hour), hour, "rr:1/2:1/2", 1,
                                           (partial.tallies[first].n,
                                            partial.tallies[first].ones))])
        assert store.add_batch(partial, now, retention, 3600) is Outcome.APPLIED
        for metric in METRICS:
            assert store.counts(metric, "rr:1/2:1/2", keys.bucket_start(now),
                                keys.bucket_start(now) + keys.BUCKET)[0].n == 6
        # A re-send hours later finds the markers through the claim's own expiry: counted once.
        later = now + timedelta(hours=2)
        assert store.add_batch(partial, later, retention, 3600) is Outcome.DUPLICATE
        assert all(hour_counts(client, m, "rr:1/2:1/2", later) == (0, 0) for m in METRICS)

        # The same id with other content: 409, and nothing anywhere changes.
        before = {m: hour_counts(client, m, "rr:1/2:1/2", now) for m in METRICS}
        other = decode_batch(encode_batch(partial.batch_id, [(m, mech, 1) for m, mech
                                                             in METRICS.items()]), METRICS)
        assert store.add_batch(other, now, retention, 3600) is Outcome.CONFLICT
        assert {m: hour_counts(client, m, "rr:1/2:1/2", now) for m in METRICS} == before
    finally:
        client.close()


def test_a_re_send_honours_the_markers_of_a_collector_from_before_the_marker_hashes(
        cluster_url: str) -> None:
    # Until the batch-id TTL has passed after an upgrade, a batch cut off mid-way by an older
    # collector may carry its per-metric STRING markers (keys.batch_applied): they still count.
    client = connect(cluster_url, cluster=True)
    store = Store(client, BATCH_SECRET)
    try:
        now = datetime.now(timezone.utc)
        reports = [(m, mech, 1) for m, mech in METRICS.items()]
        partial = decode_batch(encode_batch(new_batch_id(), reports), METRICS)
        first = next(iter(partial.tallies))
        record = store.batch_record(partial)
        expire_at = keys.expire_at_hour(now, 3600)
        assert client.set(keys.batch(partial.batch_id), record, exat=expire_at)
        hour = keys.hour_index(now)
        store._ingest(keys=[keys.batch_applied(first, partial.batch_id),  # the old layout
                            keys.counters(first, "rr:1/2:1/2", now)],
                      args=[record, expire_at, "",
                            *_counter_args(keys.month_of(hour), hour, "rr:1/2:1/2", 1, (1, 1))])
        before = {m: hour_counts(client, m, "rr:1/2:1/2", now) for m in METRICS}
        assert store.add_batch(partial, now, {m: 90 for m in METRICS}, 3600) is Outcome.APPLIED
        after = {m: hour_counts(client, m, "rr:1/2:1/2", now) for m in METRICS}
        assert after[first] == before[first]  # not counted twice
        assert all(after[m][0] == before[m][0] + 1 for m in METRICS if m != first)
    finally:
        client.close()


def test_of_concurrent_batches_reusing_one_id_exactly_one_is_counted(cluster_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    client = connect(cluster_url, cluster=True)
    store = Store(client, BATCH_SECRET)
    try:
        batch_id, now = new_batch_id(), datetime.now(timezone.utc)
        names = sorted(METRICS)
        # Eight different contents under one id, each over several slots.
        contents = [decode_batch(encode_batch(batch_id, [(m, METRICS[m], bit) for m in names]
                                              * (i + 1)), METRICS)
                    for i, bit in enumerate([0, 1] * 4)]
        before = {m: hour_counts(client, m, "rr:1/2:1/2", now)[0]
                  for m in names}
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(
                lambda b: store.add_batch(b, now, {m: 90 for m in METRICS}, 3600), contents))
        assert sorted(o.name for o in outcomes) == ["APPLIED"] + ["CONFLICT"] * 7
        winner = contents[outcomes.index(Outcome.APPLIED)]
        for m in names:
            n = hour_counts(client, m, "rr:1/2:1/2", now)[0]
            assert n - before[m] == winner.tallies[m].n
    finally:
        client.close()
