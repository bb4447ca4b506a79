"""Open-domain counters in Redis (issue 33): one packed string per metric version per declared
reporting period (hour, UTC day, ISO week), written by the ingest script exactly once, on a
single server and on a Redis Cluster."""
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
    hour = keys.hour_index(now)
    day = hour // 24
    expected = np.zeros(SKETCH.width, dtype=np.int64)
    expected[0] = len(CELLS)
    for cell in CELLS:
        expected[1 + cell] += 1
    for metric in METRICS:
        key = keys.open_counters(metric, SKETCH.id, hour)
        raw = client.get(key)
        assert raw is not None and len(raw) == 4 * SKETCH.width
        assert (np.frombuffer(raw, dtype=keys.COUNTER_DTYPE) == expected).all()
        assert client.expiretime(key) == keys.open_counters_expire_at(hour, 90)
        assert client.expiretime(key) == (day + 1 + 90) * 86400
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


def test_each_declared_period_has_its_own_string_and_expiry(redis_client: redis.Redis) -> None:
    """A week metric's reports of Monday and Sunday share one string (named by its Monday,
    expiring at the week's end + retention); an hour metric's two hours do not; a day metric
    is unchanged."""
    store = Store(redis_client, BATCH_SECRET)
    periods = {"crash_sig": "week", "domain": "hour", "search": "day"}
    monday = datetime(2026, 11, 23, 9, tzinfo=timezone.utc)
    sunday_late = datetime(2026, 11, 29, 23, 30, tzinfo=timezone.utc)
    monday_noon = datetime(2026, 11, 23, 12, tzinfo=timezone.utc)
    for moment in (monday, sunday_late, monday_noon):
        reports = [(m, SKETCH.id, 5) for m in METRICS]
        batch = decode_batch(encode_batch(new_batch_id(), reports), METRICS)
        assert store.add_batch(batch, moment, {m: 30 for m in METRICS}, 3600,
                               periods) is Outcome.APPLIED

    def n_of(key: str) -> int:
        raw = redis_client.get(key)
        assert raw is not None and len(raw) == 4 * SKETCH.width
        values = np.frombuffer(raw, dtype=keys.COUNTER_DTYPE)
        assert values[1 + 5] == values[0]  # every report was cell 5
        return int(values[0])

    week = sorted(redis_client.keys("dn:v1:{crash_sig}:*"))
    assert [k.decode() for k in week] == [f"dn:v1:{{crash_sig}}:ow:{SKETCH.id}:20261123"]
    assert n_of(week[0].decode()) == 3
    end_of_week = datetime(2026, 11, 30, tzinfo=timezone.utc).timestamp()
    assert redis_client.expiretime(week[0]) == end_of_week + 30 * 86400
    hours = sorted(k.decode() for k in redis_client.keys("dn:v1:{domain}:*"))
    assert hours == [f"dn:v1:{{domain}}:oh:{SKETCH.id}:{label}"
                     for label in ("2026112309", "2026112312", "2026112923")]
    assert [n_of(k) for k in hours] == [1, 1, 1]
    days = sorted(k.decode() for k in redis_client.keys("dn:v1:{search}:*"))
    assert days == [f"dn:v1:{{search}}:o:{SKETCH.id}:{label}" for label in ("20261123",
                                                                            "20261129")]
    assert [n_of(k) for k in days] == [2, 1]
    for key in week + hours + days:  # every one is a counters key of the layout
        assert keys.parse_open_counters(key if isinstance(key, str) else key.decode())
    assert keys.open_period_of(hours[0]) == "hour" and keys.open_period_of(days[0]) == "day"
    assert keys.open_period_of(week[0].decode()) == "week"
