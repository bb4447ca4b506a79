"""Dimension series in Redis: written with their metric's total in one script, read back per
series, and nothing else stored (the privacy scan stays clean)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import redis

from deniable.client.dimensions import Dimensions
from deniable.client.wire import decode_batch, encode_batch, new_batch_id
from deniable.core import keys
from deniable.audit.privacy_scan import scan_redis
from deniable.collector.store import Outcome, Store

RR = "rr:1/2:1/2"
DIMS = Dimensions.parse({"platform": {"values": ["android", "ios"]},
                         "app_version": {"values": ["2.3", "2.4"]}})
NOW = datetime.now(timezone.utc)


def _batch(*reports: tuple) -> object:  # type: ignore[type-arg]
    return decode_batch(encode_batch(new_batch_id(), reports), {"dark_mode": RR},
                        dimensions={"dark_mode": DIMS})


def test_each_series_is_its_own_string_beside_the_total(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    batch = _batch(("dark_mode", RR, 1, {"platform": "ios", "app_version": "2.4"}),
                   ("dark_mode", RR, 0, {"platform": "android"}), ("dark_mode", RR, 1))
    assert store.add_batch(batch, NOW, {"dark_mode": 30}, 3600) is Outcome.APPLIED  # type: ignore[arg-type]
    month = keys.month_of(NOW)
    assert sorted(k.decode() for k in redis_client.keys("dn:v1:{dark_mode}:*")) == sorted([
        keys.counters("dark_mode", RR, month),
        keys.series_counters("dark_mode", RR, "platform=ios", month),
        keys.series_counters("dark_mode", RR, "platform=android", month),
        keys.series_counters("dark_mode", RR, "app_version=2.4", month)])
    span = (NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    assert [(h.n, h.ones) for h in store.counts("dark_mode", RR, *span)] == [(3, 2)]
    assert [(h.n, h.ones) for h in store.counts("dark_mode", RR, *span,
                                                series="platform=ios")] == [(1, 1)]
    assert [(h.n, h.ones) for h in store.counts("dark_mode", RR, *span,
                                                series="platform=android")] == [(1, 0)]
    hour = keys.hour_index(NOW)
    read = store.month_strings_by_series("dark_mode", RR, DIMS.all_series("platform"),
                                         hour, hour + 1)
    assert [raw is not None for _, raw in read["platform=ios"]] == [True]
    for key in redis_client.keys("dn:v1:{dark_mode}:d:*"):
        assert redis_client.ttl(key) > 0 and keys.parse_series_counters(key.decode())
    assert scan_redis(redis_client) == []


def test_a_resent_batch_with_series_counts_once(redis_client: redis.Redis) -> None:
    store = Store(redis_client)
    batch = _batch(("dark_mode", RR, 1, {"platform": "ios"}))
    assert store.add_batch(batch, NOW, {"dark_mode": 30}, 3600) is Outcome.APPLIED  # type: ignore[arg-type]
    assert store.add_batch(batch, NOW, {"dark_mode": 30}, 3600) is Outcome.DUPLICATE  # type: ignore[arg-type]
    span = (NOW - timedelta(hours=1), NOW + timedelta(hours=1))
    assert [(h.n, h.ones) for h in store.counts("dark_mode", RR, *span,
                                                series="platform=ios")] == [(1, 1)]
