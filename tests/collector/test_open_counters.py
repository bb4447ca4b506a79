"""Open-domain counters in Redis (issue 33): one packed day string per metric version, written
by the ingest script exactly once, on a single server and on a Redis Cluster."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import redis
import redis.cluster

from deniable.client.open_domain import OpenDomainSketch
from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.collector.store import Outcome, Store, connect
from deniable.core import keys
from tests.collector.test_cluster import cluster_url  # noqa: F401 (a module fixture)
from tests.conftest import BATCH_SECRET

SKETCH = OpenDomainSketch.from_id("od:4:1:16:10:1/2")
METRICS = {"crash_sig": SKETCH.id, "domain": SKETCH.id, "search": SKETCH.id}
CELLS = [0, 5, 5, SKETCH.cells - 1, 17]


def _check(client: redis.Redis | redis.cluster.RedisCluster, store: Store) -> None:
    reports = [(m, SKETCH.id, c) for m in METRICS for c in CELLS]
    batch = decode_batch(encode_batch(new_batch_id(), reports), METRICS)
    now = datetime.now(timezone.utc)
    retention = {m: 90 for m in METRICS}
    assert store.add_batch(batch, now, retention, 3600) is Outcome.APPLIED
    assert store.add_batch(batch, now, retention, 3600) is Outcome.DUPLICATE
    day = keys.hour_index(now) // 24
    expected = np.zeros(SKETCH.width, dtype=np.int64)
    expected[0] = len(CELLS)
    for cell in CELLS:
        expected[1 + cell] += 1
    for metric in METRICS:
        key = keys.open_counters(metric, SKETCH.id, day)
        raw = client.get(key)
        assert raw is not None and len(raw) == 4 * SKETCH.width
        assert (np.frombuffer(raw, dtype=keys.COUNTER_DTYPE) == expected).all()
        assert client.expiretime(key) == keys.open_counters_expire_at(day, 90)
        assert keys.parse_open_counters(key) == (
            metric, SKETCH.id, datetime.fromtimestamp(day * 86400, timezone.utc).strftime("%Y%m%d"))


def test_a_batch_is_counted_once_in_the_day_string(redis_client: redis.Redis) -> None:
    _check(redis_client, Store(redis_client, BATCH_SECRET))


def test_a_batch_is_counted_once_per_metric_on_a_cluster(cluster_url: str) -> None:  # noqa: F811
    client = connect(cluster_url, cluster=True)
    assert isinstance(client, redis.cluster.RedisCluster)
    try:
        _check(client, Store(client, BATCH_SECRET))
    finally:
        client.close()
