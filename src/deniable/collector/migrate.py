"""Convert layout-1 counters (one HASH {n, ones} per metric and hour) to packed month strings.

Each hour hash is added to its month's string and deleted in one atomic script, in the
metric's own Redis Cluster slot: the conversion can be interrupted and re-run, and it can run
while collectors (which write only the new layout) take traffic. Nothing is counted twice: a
hash that is gone has been moved.

The month strings get the expiry the collector gives them (``keys.counters_expire_at``), with
the metric's retention from the registry; a metric the registry does not know keeps the
retention its hash's TTL implies (rounded to whole days).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

import redis
import redis.cluster

from deniable.core import keys
from deniable.collector.store import CounterOverflowError, script_errors

_MIGRATE_LUA = resources.files("deniable.collector").joinpath("migrate.lua").read_text()


@dataclass
class MigrationReport:
    """What a migration did."""

    moved: int = 0
    already_gone: int = 0
    skipped: list[str] = field(default_factory=list)  # keys that are not counters (left alone)


def migrate_v1(client: redis.Redis | redis.cluster.RedisCluster,
               retention_days: Callable[[str], int | None],
               progress: Callable[[int], None] | None = None) -> MigrationReport:
    """Move every layout-1 counters hash into the packed month layout.

    Args:
        client: the collector's Redis.
        retention_days: metric name -> its retention in days, or None if unknown (then the
            hash's TTL decides).
        progress: called with the number of hashes moved so far, every 10,000.

    Raises:
        CounterOverflowError: an hour's counts would overflow its 32-bit counter (that hour's
            hash is left in place; nothing of it was written).
    """
    script = client.register_script(_MIGRATE_LUA)
    report = MigrationReport()
    for raw in client.scan_iter(match=keys.V1_COUNTERS_PATTERN, count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        parsed = keys.parse_counters_v1(key)
        if parsed is None:
            report.skipped.append(key)
            continue
        metric, mechanism_id, hour = parsed
        try:
            width = keys.width(mechanism_id)
        except ValueError:
            report.skipped.append(key)
            continue
        retention = retention_days(metric)
        if retention is None:
            retention = _retention_from_ttl(client, key, hour)
        month = keys.month_of(hour)
        with script_errors():
            result = int(script(keys=[key, keys.counters(metric, mechanism_id, month)],
                                args=[month.size_bytes(width),
                                      keys.counters_expire_at(month, retention),
                                      keys.counter_index(month, hour, 0, width)]))
        if result == -2:
            raise CounterOverflowError(f"{key}: its counts would overflow a 32-bit counter")
        if result == 1:
            report.moved += 1
            if progress is not None and report.moved % 10_000 == 0:
                progress(report.moved)
        else:
            report.already_gone += 1
    unmigrated(client)  # none left (or a collector wrote new ones meanwhile): marks the Redis
    return report


LAYOUT = b"2"
"""The value of ``keys.layout_marker()``: every counter is in the packed month layout."""


def unmigrated(client: redis.Redis | redis.cluster.RedisCluster) -> bool:
    """Whether a layout-1 counters hash is left (reads would undercount until ``deniable
    migrate`` moves it). One GET once ``keys.layout_marker()`` says none are; otherwise a SCAN
    that stops at the first such hash, and writes the marker when it finds none (a Redis that
    never held one, or a migration's end), so the SCAN runs once per Redis."""
    if client.get(keys.layout_marker()) == LAYOUT:
        return False
    for raw in client.scan_iter(match=keys.V1_COUNTERS_PATTERN, count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        if keys.parse_counters_v1(key) is not None:
            return True
    client.set(keys.layout_marker(), LAYOUT)
    return False


def _retention_from_ttl(client: redis.Redis | redis.cluster.RedisCluster, key: str,
                        hour: int) -> int:
    """Layout 1 set a hash's TTL to the retention at its first write, within its hour."""
    ttl = int(client.ttl(key))
    if ttl < 0:
        return 90
    expires = time.time() + ttl
    return max(1, math.ceil((expires - hour * keys.HOUR_SECONDS) / 86400 - 1 / 24))
